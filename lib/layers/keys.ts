/**
 * The layers' keys of a request: client addresses normalised (IPv4-mapped IPv6,
 * and NAT64 IPv6 of a global IPv4 address, as that IPv4 address, other IPv6
 * grouped by prefix, ports dropped)
 * and the key caches of the edge, the app layer and the limiters. The key format
 * itself is output/key-format.ts.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net'
import type { FastifyRequest } from 'fastify'
import type { EdgePlan } from '../config/plan.js'
import { bucketKey, inRegistration, keyDigest, limiterKey } from '../output/key-format.js'
import { memoize, ofClientAddress } from './key-cache.js'

/**
 * The edge's key caches: `{key:<digest>}:edge` of an `edge.key` value, `{ip:<address>}:edge`
 * of a client address (`:hourly.edge` in a registration named `hourly`).
 */
export function edgeKeys (edge: Pick<EdgePlan, 'keySecret' | 'ipv6Subnet'>, registration: string | undefined): { keyOfValue: (value: string) => string, keyOfAddress: (ip: string) => string } {
  const digest = keyDigest(edge.keySecret)
  const bucket = inRegistration(registration, 'edge')
  return {
    keyOfValue: memoize((value) => bucketKey('key', digest(value), bucket)),
    keyOfAddress: memoize((ip) => bucketKey('ip', clientAddress(ip, edge.ipv6Subnet), bucket))
  }
}

/** A limiter's bucket keys: of a value of its key function, and of a request's client address. */
export interface LimiterKeys {
  /** `{lim:<digest>}:limiter:<name>` (HMAC-SHA256 with `edge.keySecret`, else SHA-256); cached. */
  value: (value: string) => string
  /** `{ip:<address>}:limiter:<name>` for the request's client address (IPv6 by `edge.ipv6Subnet`); cached. */
  address: (request: FastifyRequest) => string
}

/**
 * The keys of the limiter named `name`, digested and grouped as the edge does
 * (its `keySecret`, its `ipv6Subnet`, 64 without an edge); `perConnection`: see `ofClientAddress`.
 */
export function limiterKeys (name: string, settings: { edge: Pick<EdgePlan, 'keySecret' | 'ipv6Subnet'> | undefined, name: string | undefined }, perConnection: boolean): LimiterKeys {
  const { edge } = settings
  const digest = keyDigest(edge?.keySecret)
  const ipv6Subnet = edge?.ipv6Subnet ?? 64
  return {
    value: memoize((value) => limiterKey('lim', digest(value), name, settings.name)),
    address: ofClientAddress(memoize((ip) => limiterKey('ip', clientAddress(ip, ipv6Subnet), name, settings.name)), perConnection)
  }
}

/** The app layer's bucket keys, shared by the routes of one registration. */
export interface AppKeys {
  /** `{user:<id>}:app` from a user id; cached. */
  user: (id: string) => string
  /** `{ip:<address>}:app` for the request's client address; cached. */
  address: (request: FastifyRequest) => string
  /** The key of a route's own bucket `bucket` (`route:POST /export`) for `who`, the requester of `request`. */
  route: (who: { kind: 'user' | 'ip', id: string }, request: FastifyRequest, bucket: string) => string
}

/**
 * A user id as store keys hold it: as it is, or under `app.digestIds` its digest
 * (HMAC-SHA256 with `keySecret`, else SHA-256), as `edge.key` values are kept.
 */
export function storedUserId (digestIds: boolean, keySecret: string | undefined): (id: string) => string {
  return digestIds ? memoize(keyDigest(keySecret)) : (id) => id
}

/**
 * `perConnection`: request.ip is the connection's address (trustProxy off), see
 * `ofClientAddress`; `userId`: a user id as keys hold it (`storedUserId`);
 * `registration`: the registration's `name`.
 */
export function appKeys (ipv6Subnet: number, perConnection: boolean, userId: (id: string) => string, registration: string | undefined): AppKeys {
  const app = inRegistration(registration, 'app')
  return {
    user: memoize((id) => bucketKey('user', userId(id), app)),
    address: ofClientAddress(memoize((ip) => bucketKey('ip', clientAddress(ip, ipv6Subnet), app)), perConnection),
    // request.ip is undefined once the socket is gone (then `unknown`, like the other keys).
    route: (who, request, bucket) => bucketKey(who.kind, who.kind === 'ip' ? clientAddress(request.ip, ipv6Subnet) : userId(who.id), inRegistration(registration, bucket))
  }
}

/**
 * The client address as a rate-limit identity: IPv4 as is; IPv4-mapped IPv6
 * (`::ffff:1.2.3.4`) and NAT64 IPv6 of the well-known prefix 64:ff9b::/96
 * (`64:ff9b::1.2.3.4`, `64:ff9b::102:304`: an IPv4 client behind a NAT64
 * gateway) as the IPv4 address they carry, the latter only for a global IPv4
 * address (`nat64IPv4`); other IPv6 reduced to its first `ipv6Subnet` bits
 * (`2001:db8:1:2::/64`), since one host commonly holds a whole /64.
 * A port some proxies append (`203.0.113.7:40001`, `[2001:db8::1]:443`,
 * `::ffff:203.0.113.7:40001`) is dropped first, so that each connection does not
 * get a bucket of its own. Anything that is not an IP address is returned
 * unchanged (and bounded later).
 */
export function clientAddress (ip: string | undefined, ipv6Subnet: number): string {
  if (ip === undefined || ip === '') return 'unknown'
  if (isIPv4(ip)) return ip
  const host = withoutPort(ip)
  if (isIPv4(host)) return host
  const zoneAt = host.indexOf('%')
  const address = zoneAt === -1 ? host : host.slice(0, zoneAt)
  if (!isIPv6(address)) return ip
  const groups = ipv6Groups(address)
  if (isMapped(groups)) return embeddedIPv4(groups)
  return nat64IPv4(groups) ?? ipv6Prefix(groups, ipv6Subnet)
}

/** A client address as the allow-list checks it (see `plainAddress`). */
export interface PlainAddress {
  address: string
  family: 'ipv4' | 'ipv6'
  /** The global IPv4 address a NAT64 address (64:ff9b::/96) carries, whose IPv4 rules apply too (see `nat64IPv4`). */
  ipv4?: string
}

/**
 * `ip` as an address BlockList can check: without a port or an IPv6 zone, with
 * its family, and for a NAT64 address the global IPv4 address it carries
 * (BlockList matches an IPv4-mapped address against IPv4 rules itself, not a NAT64 one);
 * `undefined` for anything that is not an IP address.
 */
export function plainAddress (ip: string | undefined): PlainAddress | undefined {
  if (ip === undefined || ip === '') return undefined
  const host = isIPv4(ip) ? ip : withoutPort(ip)
  if (isIPv4(host)) return { address: host, family: 'ipv4' }
  const zoneAt = host.indexOf('%')
  const address = zoneAt === -1 ? host : host.slice(0, zoneAt)
  if (!isIPv6(address)) return undefined
  const ipv4 = nat64IPv4(ipv6Groups(address))
  return ipv4 === undefined ? { address, family: 'ipv6' } : { address, family: 'ipv6', ipv4 }
}

/** IPv4-mapped IPv6: `::ffff:0:0/96`. */
const isMapped = (groups: readonly number[]): boolean =>
  groups[0] === 0 && groups[1] === 0 && groups[2] === 0 && groups[3] === 0 && groups[4] === 0 && groups[5] === 0xffff

/** NAT64 (SIIT) of the well-known prefix `64:ff9b::/96` (RFC 6052): an IPv4 host in the last 32 bits. */
const isNat64 = (groups: readonly number[]): boolean =>
  groups[0] === 0x64 && groups[1] === 0xff9b && groups[2] === 0 && groups[3] === 0 && groups[4] === 0 && groups[5] === 0

/**
 * The IPv4 addresses the well-known prefix must not carry (RFC 6052 §3.1: no
 * non-global IPv4 address; the ranges of RFC 6890 that are not globally
 * reachable, and multicast and reserved space, which no client sends from).
 */
const NON_GLOBAL_IPV4 = new BlockList()
for (const [network, prefix] of [
  ['0.0.0.0', 8], // this network
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // shared address space (carrier-grade NAT)
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation (TEST-NET-1)
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation (TEST-NET-2)
  ['203.0.113.0', 24], // documentation (TEST-NET-3)
  ['224.0.0.0', 3] // multicast (224/4), reserved (240/4) and the broadcast address
] as const) NON_GLOBAL_IPV4.addSubnet(network, prefix, 'ipv4')

/**
 * The IPv4 address a NAT64 address of the well-known prefix carries, when it is
 * a global one; else `undefined`, and the address is IPv6 like any other. A
 * non-global IPv4 address behind 64:ff9b::/96 is spoofed or misrouted: taken as
 * that address, `64:ff9b::7f00:1` would pass an allow-list rule for 127.0.0.1.
 */
function nat64IPv4 (groups: readonly number[]): string | undefined {
  if (!isNat64(groups)) return undefined
  const ipv4 = embeddedIPv4(groups)
  return NON_GLOBAL_IPV4.check(ipv4, 'ipv4') ? undefined : ipv4
}

/** The IPv4 address in the last 32 bits of an IPv6 address, dotted. */
function embeddedIPv4 (groups: readonly number[]): string {
  const high = groups[6] as number
  const low = groups[7] as number
  return `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`
}

const PORT = /^\d{1,5}$/

/**
 * `ip` without a port: `203.0.113.7:40001` → `203.0.113.7`; `[2001:db8::1]:443`
 * and `[2001:db8::1]` → `2001:db8::1`; `::ffff:203.0.113.7:40001` →
 * `::ffff:203.0.113.7`. A bare IPv6 address is otherwise left whole: its last
 * group is not a port (`2001:db8::1:4000` is an address). Only a dotted IPv4
 * tail, which ends an IPv6 address, makes a number after it a port. The caller
 * checks that what is left is an address.
 */
function withoutPort (ip: string): string {
  const lastColon = ip.lastIndexOf(':')
  if (ip.startsWith('[')) {
    const end = ip.indexOf(']')
    const bracketed = end === ip.length - 1 || (lastColon === end + 1 && PORT.test(ip.slice(lastColon + 1)))
    return end !== -1 && bracketed ? ip.slice(1, end) : ip
  }
  if (lastColon === -1 || !PORT.test(ip.slice(lastColon + 1))) return ip
  const host = ip.slice(0, lastColon)
  // One colon: an IPv4 address and a port. Two or more: IPv6, left whole, unless it ends in a dotted IPv4 address.
  return ip.indexOf(':') === lastColon || (host.lastIndexOf('.') > host.lastIndexOf(':') && isIPv6(host)) ? host : ip
}

/** The eight 16-bit groups of a valid IPv6 address (`::` expanded, a dotted IPv4 tail converted). */
function ipv6Groups (address: string): number[] {
  let text = address
  const tail: number[] = []
  const lastColon = text.lastIndexOf(':')
  const last = text.slice(lastColon + 1)
  if (last.includes('.')) {
    const [a, b, c, d] = last.split('.').map(Number) as [number, number, number, number]
    tail.push((a << 8) | b, (c << 8) | d)
    text = text.slice(0, lastColon + 1) + '0'
  }
  const [head = '', rest] = text.split('::') as [string, string | undefined]
  const parse = (part: string): number[] => part === '' ? [] : part.split(':').map((group) => parseInt(group, 16))
  const front = parse(head)
  let back = rest === undefined ? [] : parse(rest)
  if (tail.length > 0) {
    // The placeholder '0' stands for the two groups of the dotted tail.
    if (rest === undefined) front.splice(front.length - 1, 1, ...tail)
    else back = [...back.slice(0, -1), ...tail]
  }
  const zeros = new Array<number>(8 - front.length - back.length).fill(0)
  return [...front, ...zeros, ...back]
}

/** `2001:db8:1:2::/64`: the first `bits` bits of the address, the rest zeroed. */
function ipv6Prefix (groups: readonly number[], bits: number): string {
  if (bits >= 128) return groups.map((group) => group.toString(16)).join(':')
  const kept: string[] = []
  for (let i = 0; i * 16 < bits; i++) {
    const keepBits = Math.min(16, bits - i * 16)
    const mask = (0xffff << (16 - keepBits)) & 0xffff
    kept.push(((groups[i] as number) & mask).toString(16))
  }
  return `${kept.join(':')}${kept.length < 8 ? '::' : ''}/${bits}`
}
