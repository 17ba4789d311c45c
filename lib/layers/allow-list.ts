/**
 * The allow-list's test of a request: requests no layer limits. Its client
 * address against the list's `BlockList` (an IPv4-mapped IPv6 client, or a NAT64
 * one of a global IPv4 address, matches its IPv4 rule as well as the IPv6 rules
 * of its own address), then the predicate. Checked first, by each layer.
 */
import type { BlockList } from 'node:net'
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import type { Done } from './outcome.js'
import type { AllowListSettings } from '../config/allow-list.js'
import { ThrottledLog } from '../output/throttled-log.js'
import { memoize, ofClientAddress } from './key-cache.js'
import { plainAddress } from './keys.js'
import { continueAfter, isThenable } from './promises.js'
import type { Lookups } from './lookup.js'

/** How often a predicate that throws is logged, at most: once per minute (ms). */
export const MATCH_ERROR_LOG_INTERVAL_MS = 60_000

/** What the test needs besides the list. */
export interface AllowTestContext {
  /** request.ip is the connection's address (trustProxy off): an address's answer is kept per connection. */
  perConnection: boolean
  log: FastifyBaseLogger
  /** A clock in ms, for the throttled log. */
  now: () => number
  /** Awaits a predicate's promise. */
  lookups: Lookups
}

/** Whether the client address `ip` is on `list`. */
function onList (list: BlockList): (ip: string) => boolean {
  return (ip) => {
    const address = plainAddress(ip)
    if (address === undefined) return false
    return list.check(address.address, address.family) || (address.ipv4 !== undefined && list.check(address.ipv4, 'ipv4'))
  }
}

/**
 * Whether `request` is on the list: its address first (the answer cached per
 * connection or address), then the predicate, awaited when it returns a promise.
 * A predicate that throws, rejects, is late or answers anything but `true` does
 * not allow; a throw is logged at most once per MATCH_ERROR_LOG_INTERVAL_MS.
 */
export function allowTest (settings: AllowListSettings, context: AllowTestContext): (request: FastifyRequest) => boolean | Promise<boolean> {
  const { match } = settings
  const addressOf = settings.addresses === undefined ? undefined : ofClientAddress(memoize(onList(settings.addresses)), context.perConnection)
  const throws = new ThrottledLog(MATCH_ERROR_LOG_INTERVAL_MS, context.now)
  return (request) => {
    if (addressOf !== undefined && addressOf(request)) return true
    if (match === undefined) return false
    try {
      const answer = match(request)
      if (isThenable(answer)) return context.lookups.wait('allowList', answer).then((settled) => settled === true)
      return answer === true
    } catch (error) {
      throws.log((since) => {
        context.log.error({ err: error, since }, 'fastify-tollgate: allowList.match threw; the request is limited as usual (logged once a minute; `since`: throws not logged since the last line)')
      })
      return false
    }
  }
}

/** A hook's signature, as the layers' run. */
type LimitHook = (request: FastifyRequest, reply: FastifyReply, done: Done) => void

/**
 * `limit`, run unless the allow-list lets the request through (then `done()`); an
 * answer that comes later (a predicate's promise) is awaited, one that comes at once
 * is not. Without an allow-list, `limit` itself.
 */
export function unlessAllowed (allowed: ((request: FastifyRequest) => boolean | Promise<boolean>) | undefined, limit: LimitHook): LimitHook {
  if (allowed === undefined) return limit
  return (request, reply, done) => {
    const allow = allowed(request)
    if (allow === true) done()
    else if (allow === false) limit(request, reply, done)
    else {
      const end = { request, reply, done }
      continueAfter(end, allow, (yes) => { if (yes) end.done(); else limit(request, reply, end.done) })
    }
  }
}
