/**
 * The allow-list: requests no layer limits. Addresses and CIDR ranges go into a
 * `net.BlockList` (IPv4 and IPv6; an IPv4-mapped IPv6 client matches its IPv4
 * rule); a predicate may add requests of any kind. Checked first, by each layer.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net'
import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import { plainAddress } from './keys.js'
import { ThrottledLog } from '../output/throttled-log.js'
import { isPromise } from './sync.js'
import { checkFunction, checkKnownKeys, describe, failOption, isPlainObject } from '../config/check.js'

/** Requests never limited: addresses and CIDR ranges, a predicate, or both. */
export type AllowListOption = readonly string[] | ((request: FastifyRequest) => boolean) | {
  /** IP addresses (`203.0.113.7`, `2001:db8::1`) and CIDR ranges (`10.0.0.0/8`, `2001:db8::/32`). */
  addresses?: readonly string[] | undefined
  /** Returns `true` for a request never limited. Synchronous; one that throws does not allow. */
  match?: ((request: FastifyRequest) => boolean) | undefined
}

/** The checked allow-list. */
export interface AllowListSettings {
  /** Whether a client address (`request.ip`) is on the list; `undefined` without addresses. */
  address: ((ip: string) => boolean) | undefined
  match: ((request: FastifyRequest) => boolean) | undefined
}

/** How often a predicate that throws is logged, at most: once per minute (ms). */
export const MATCH_ERROR_LOG_INTERVAL_MS = 60_000

/** Validates `allowList` (throws `TOLLGATE_INVALID_OPTION` naming the bad entry). */
export function checkAllowList (value: unknown): AllowListSettings | undefined {
  if (value === undefined) return undefined
  if (typeof value === 'function') return { address: undefined, match: value as AllowListSettings['match'] }
  if (Array.isArray(value)) return { address: addressList('allowList', value), match: undefined }
  if (!isPlainObject(value)) {
    return failOption(`Expected \`allowList\` to be an array of IP addresses and CIDR ranges, a function of the request, or { addresses, match }, got ${describe(value)}`)
  }
  checkKnownKeys(failOption, 'allowList', value, ['addresses', 'match'])
  const { addresses, match } = value
  if (addresses !== undefined && !Array.isArray(addresses)) {
    failOption(`Expected \`allowList.addresses\` to be an array of IP addresses and CIDR ranges, got ${describe(addresses)}`)
  }
  return {
    address: addresses === undefined ? undefined : addressList('allowList.addresses', addresses as unknown[]),
    match: match === undefined ? undefined : checkFunction(failOption, 'allowList.match', match)
  }
}

/** A BlockList of `entries`, as a test of one address; each entry checked. */
function addressList (path: string, entries: readonly unknown[]): (ip: string) => boolean {
  const list = new BlockList()
  entries.forEach((entry, i) => {
    const rule = typeof entry === 'string' ? parseRule(entry) : undefined
    if (rule === undefined) {
      failOption(`Expected \`${path}[${i}]\` to be an IP address or a CIDR range (IPv4 or IPv6, e.g. \`10.0.0.0/8\`), got ${describe(entry)}`)
    }
    if (rule.prefix === undefined) list.addAddress(rule.address, rule.family)
    else list.addSubnet(rule.address, rule.prefix, rule.family)
  })
  return (ip) => {
    const address = plainAddress(ip)
    return address !== undefined && list.check(address.address, address.family)
  }
}

/** `10.0.0.0/8` → address, family, prefix; a plain address has no prefix. `undefined` when malformed. */
function parseRule (entry: string): { address: string, family: 'ipv4' | 'ipv6', prefix: number | undefined } | undefined {
  const slash = entry.indexOf('/')
  const address = slash === -1 ? entry : entry.slice(0, slash)
  const family = isIPv4(address) ? 'ipv4' : isIPv6(address) ? 'ipv6' : undefined
  if (family === undefined) return undefined
  if (slash === -1) return { address, family, prefix: undefined }
  const bits = entry.slice(slash + 1)
  const prefix = /^\d{1,3}$/.test(bits) ? Number(bits) : NaN
  if (!(prefix <= (family === 'ipv4' ? 32 : 128))) return undefined
  return { address, family, prefix }
}

/**
 * Whether `request` is on the list: its address first (`addressOf` gives the
 * answer for the request's client address, cached per connection or address),
 * then the predicate. A predicate that throws or returns anything but `true`
 * does not allow; a throw is logged at most once per MATCH_ERROR_LOG_INTERVAL_MS.
 */
export function allowTest (
  settings: AllowListSettings,
  addressOf: ((request: FastifyRequest) => boolean) | undefined,
  log: FastifyBaseLogger,
  now: () => number
): (request: FastifyRequest) => boolean {
  const { match } = settings
  const throws = new ThrottledLog(MATCH_ERROR_LOG_INTERVAL_MS, now)
  return (request) => {
    if (addressOf !== undefined && addressOf(request)) return true
    if (match === undefined) return false
    try {
      const answer = match(request)
      if (isPromise(answer)) throw new Error('allowList.match returned a promise: it must answer synchronously')
      return answer === true
    } catch (error) {
      throws.log((since) => {
        log.error({ err: error, since }, 'fastify-tollgate: allowList.match threw or returned a promise; the request is limited as usual (logged once a minute; `since`: throws not logged since the last line)')
      })
      return false
    }
  }
}
