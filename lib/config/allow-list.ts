/**
 * `allowList`, checked: its addresses and CIDR ranges in a `net.BlockList` (IPv4
 * and IPv6), and its predicate. The test of a request is in layers/allow-list.ts.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net'
import type { FastifyRequest } from 'fastify'
import { checkFunction, checkKnownKeys, describe, failOption, isPlainObject } from './check.js'
import { ALLOW_LIST_OPTIONS, keysOf } from './rows.js'

/** The checked allow-list. */
export interface AllowListSettings {
  /** The addresses and ranges on the list; `undefined` without addresses. */
  addresses: BlockList | undefined
  match: ((request: FastifyRequest) => boolean | PromiseLike<boolean>) | undefined
}

/** Validates `allowList` (throws `TOLLGATE_INVALID_OPTION` naming the bad entry). */
export function checkAllowList (value: unknown): AllowListSettings | undefined {
  if (value === undefined) return undefined
  if (typeof value === 'function') return { addresses: undefined, match: value as AllowListSettings['match'] }
  if (Array.isArray(value)) return { addresses: addressList('allowList', value), match: undefined }
  if (!isPlainObject(value)) {
    return failOption(`Expected \`allowList\` to be an array of IP addresses and CIDR ranges, a function of the request, or { addresses, match }, got ${describe(value)}`)
  }
  checkKnownKeys(failOption, 'allowList', value, keysOf(ALLOW_LIST_OPTIONS))
  const { addresses, match } = value
  if (addresses !== undefined && !Array.isArray(addresses)) {
    failOption(`Expected \`allowList.addresses\` to be an array of IP addresses and CIDR ranges, got ${describe(addresses)}`)
  }
  return {
    addresses: addresses === undefined ? undefined : addressList('allowList.addresses', addresses as unknown[]),
    match: match === undefined ? undefined : checkFunction(failOption, 'allowList.match', match)
  }
}

/** A BlockList of `entries`, each checked. */
function addressList (path: string, entries: readonly unknown[]): BlockList {
  const list = new BlockList()
  entries.forEach((entry, i) => {
    const rule = typeof entry === 'string' ? parseRule(entry) : undefined
    if (rule === undefined) {
      failOption(`Expected \`${path}[${i}]\` to be an IP address or a CIDR range (IPv4 or IPv6, e.g. \`10.0.0.0/8\`), got ${describe(entry)}`)
    }
    if (rule.prefix === undefined) list.addAddress(rule.address, rule.family)
    else list.addSubnet(rule.address, rule.prefix, rule.family)
  })
  return list
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
