/**
 * `fastify.tollgate` by hand: which bucket a call names, and its `peek`, `refund`
 * and `reset` (`consume` is in plugin.ts). A call names either a bucket of its own,
 * by a key (a string or a number) and a policy (`'login:alice', { capacity: 5, refillPerSecond: 1 / 60 }`),
 * or a bucket a layer uses, by who it belongs to (`{ layer: 'app', user: '42' }`),
 * whose key and policy are then the layer's own. Nothing here runs on a request
 * that does not call it.
 */
import type { FastifyRequest } from 'fastify'
import { read } from '../engine/bucket.js'
import type { BucketPolicy } from '../types/engine.js'
import { keyOf } from './client-key.js'
import { namedPolicy, type NamedPolicy } from '../output/headers.js'
import { bucketKey, inRegistration, manualKey } from '../output/key-format.js'
import { clientAddress } from './keys.js'
import { routeBucketOf, routeOfBucket } from '../output/route-names.js'
import { overdraws } from '../engine/share.js'
import { storeOf, type Settings } from './context.js'
import type { BucketReport, LimitDecision } from '../types/decision.js'
import { storeMethod } from '../stores/store-method.js'
import { share, type TierLimit } from '../config/limits.js'
import { checkKnownKeys, checkNumber, checkObject, checkPolicy, describe, expected, failOption } from '../config/check.js'

/**
 * A bucket a layer uses, named by who it belongs to; the call then uses the
 * layer's key and policy (this process's share of it), as the layer does:
 * - `{ layer: 'edge', ip }`: the edge bucket of a client address (IPv4-mapped
 *   addresses unmapped, IPv6 grouped by `edge.ipv6Subnet`, as the edge does);
 * - `{ layer: 'edge', key }`: the edge bucket of an `edge.key` value (an API key);
 * - `{ layer: 'edge', request }`: the edge bucket of this request, as the edge keys
 *   it (on a route the edge skips, `rateLimit: false`, it took nothing there);
 * - `{ layer: 'app', user, tier? }`: a user's bucket, under `tier` as the app layer
 *   maps it (a name of `app.tiers`, else `default`); a tier of several limits
 *   names all its buckets: `consume` takes from all, all or nothing, `peek` reads
 *   all, `refund` gives back to each, `reset` deletes each;
 * - `{ layer: 'app', ip }`: an anonymous client's bucket, under the anonymous tier;
 * - either app form with `route: 'POST /export'`: the user's (or client's) own
 *   bucket of that route's `rateLimit.quota` instead (the route as declared, after
 *   the plugin: its method and URL; a GET route also answers HEAD).
 */
export type LayerBucket =
  | { layer: 'edge', ip: string, key?: never, request?: never }
  | { layer: 'edge', key: string | number, ip?: never, request?: never }
  | { layer: 'edge', request: FastifyRequest, ip?: never, key?: never }
  | { layer: 'app', user: string | number, tier?: string | undefined, route?: string | undefined, ip?: never }
  | { layer: 'app', ip: string, route?: string | undefined, user?: never, tier?: never }

/** A bucket now: as in `LimitDecision.buckets`, and the time until it is full. */
export interface BucketLevel extends BucketReport {
  /** Milliseconds until the bucket is full (0: full now; `Infinity`: it never refills). */
  fullInMs: number
}

/**
 * What `fastify.tollgate.peek` returns: the decision `consume` would make now for
 * the same cost, without taking anything. `allowed`: the cost fits now;
 * `retryAfterMs`: until it does; `buckets[0].tokens`: the tokens held now. A
 * refusal can be thrown as it is: `new RateLimitedError(decision)`.
 */
export interface PeekDecision extends LimitDecision {
  buckets: BucketLevel[]
}

/** The buckets a call names (several for a tier of several limits), resolved to what the store needs. */
export interface Resolved {
  layer: LimitDecision['layer']
  tier: string | undefined
  buckets: readonly ResolvedBucket[]
}

export interface ResolvedBucket {
  /** The store key. */
  key: string
  /** Its name and policy (this process's share), as in the headers. */
  named: NamedPolicy
  /**
   * The capacity of the whole quota, for the overdraft of a cost above this
   * process's share; `undefined` for a bucket that never overdraws (the edge, a
   * route's own bucket, which the layers charge one token at a time).
   */
  wholeCapacity: number | undefined
}

/** Route bucket name (`route:POST /export`) → the route's own limits by tier. */
export type RouteQuotas = Map<string, Record<string, readonly TierLimit[]>>

/** Everything the decorator needs to name buckets. */
export interface Manual {
  settings: Settings
  routes: RouteQuotas
}

/**
 * The bucket a call names: `target` a key of its own (with `policy`), or a layer's
 * bucket (`policy` then unused). Throws `TOLLGATE_INVALID_OPTION` naming the argument.
 */
export async function resolve (m: Manual, target: unknown, policy: unknown): Promise<Resolved> {
  const own = ownKey(target)
  if (own !== undefined) {
    const whole = checkPolicy(failOption, 'policy', policy)
    const scaled = share(failOption, 'policy', whole, m.settings.quotaShare)
    return { layer: 'manual', tier: undefined, buckets: [{ key: manualKey(own, m.settings.name), named: namedPolicy(inRegistration(m.settings.name, 'manual'), scaled), wholeCapacity: whole.capacity }] }
  }
  return layerBucket(m, target)
}

/**
 * A call's key of its own: a non-empty string, or a finite number (the key of
 * its string: `42` and `'42'` name one bucket); `undefined` for anything else
 * (a layer's bucket, or a mistake).
 */
export function ownKey (target: unknown): string | undefined {
  if (typeof target === 'string') return target === '' ? undefined : target
  return typeof target === 'number' && Number.isFinite(target) ? String(target) : undefined
}

/** The store keys a call names, without a policy (`reset`). */
async function resolveKeys (m: Manual, target: unknown): Promise<string[]> {
  const own = ownKey(target)
  return own !== undefined ? [manualKey(own, m.settings.name)] : (await layerBucket(m, target)).buckets.map((bucket) => bucket.key)
}

async function layerBucket (m: Manual, target: unknown): Promise<Resolved> {
  if (typeof target !== 'object' || target === null) {
    expected(failOption, 'key', "a non-empty string, a finite number or a layer's bucket ({ layer: 'edge', ip } or { layer: 'app', user })", target)
  }
  const bucket = checkObject(failOption, 'bucket', target)
  if (bucket.layer === 'edge') return edgeBucket(m, bucket)
  if (bucket.layer === 'app') return appBucket(m, bucket)
  return expected(failOption, 'bucket.layer', "'edge' or 'app'", bucket.layer)
}

async function edgeBucket (m: Manual, bucket: Record<string, unknown>): Promise<Resolved> {
  const edge = m.settings.edge
  if (edge === undefined) failOption('`bucket.layer` is `"edge"`, but the edge layer is disabled (set the `edge` option)')
  const named = edge.bucket
  if (named === undefined) failOption('`bucket.layer` is `"edge"`, but under `edge.global: false` clients have no edge bucket of their own (only routes do)')
  checkKnownKeys(failOption, 'bucket', bucket, ['layer', 'ip', 'key', 'request'])
  const { ip, key, request } = bucket
  const given = [ip, key, request].filter((value) => value !== undefined).length
  if (given !== 1) failOption(`Expected \`bucket\` to name the edge's client by one of \`ip\`, \`key\` or \`request\`, got ${describe(bucket)}`)
  let storeKey: string
  if (ip !== undefined) {
    storeKey = edge.keyOfAddress(checkText('bucket.ip', ip))
  } else if (key !== undefined) {
    storeKey = edge.keyOfValue(checkId('bucket.key', key))
  } else {
    if (typeof request !== 'object' || request === null) expected(failOption, 'bucket.request', 'a Fastify request', request)
    const addressKeyOf = (client: FastifyRequest): string => edge.keyOfAddress(client.ip ?? '')
    storeKey = await keyOf(request as FastifyRequest, { fn: edge.key, name: 'edge.key', keyOfValue: edge.keyOfValue, addressKeyOf, lookups: m.settings.lookups })
  }
  return { layer: 'edge', tier: undefined, buckets: [{ key: storeKey, named, wholeCapacity: undefined }] }
}

function appBucket (m: Manual, bucket: Record<string, unknown>): Resolved {
  const app = m.settings.app
  if (app === undefined) failOption('`bucket.layer` is `"app"`, but the app layer is disabled (set the `app` option)')
  const { user, ip, tier, route } = bucket
  if ((user === undefined) === (ip === undefined)) {
    failOption(`Expected \`bucket\` to name the app layer's requester by one of \`user\` or \`ip\`, got ${describe(bucket)}`)
  }
  let kind: 'user' | 'ip'
  let id: string
  let tierName: string
  if (user !== undefined) {
    checkKnownKeys(failOption, 'bucket', bucket, ['layer', 'user', 'tier', 'route'])
    kind = 'user'
    id = app.userId(checkId('bucket.user', user))
    if (tier !== undefined && typeof tier !== 'string') expected(failOption, 'bucket.tier', 'a string', tier)
    // As the app layer maps a tier claim: an own name of app.tiers, else default.
    tierName = typeof tier === 'string' && Object.hasOwn(app.tiers, tier) ? tier : 'default'
  } else {
    checkKnownKeys(failOption, 'bucket', bucket, ['layer', 'ip', 'route'])
    kind = 'ip'
    id = clientAddress(checkText('bucket.ip', ip), m.settings.edge?.ipv6Subnet ?? 64)
    tierName = app.anonymousTier
  }
  if (route === undefined) {
    const key = bucketKey(kind, id, inRegistration(m.settings.name, 'app'))
    const limits = app.tiers[tierName] as readonly TierLimit[]
    return { layer: 'app', tier: tierName, buckets: limits.map((limit) => ({ key: key + limit.keySuffix, named: limit.named, wholeCapacity: limit.whole.capacity })) }
  }
  const name = routeBucketOf(checkText('bucket.route', route))
  const quota = m.routes.get(name)
  if (quota === undefined) {
    const known = [...m.routes.keys()].map(routeOfBucket)
    expected(failOption, 'bucket.route', `a route with a \`rateLimit.quota\`, declared after the plugin (${known.length === 0 ? 'there is none' : known.map((r) => `\`${r}\``).join(', ')})`, route)
  }
  const key = bucketKey(kind, id, inRegistration(m.settings.name, name))
  const limits = (quota[tierName] ?? quota.default) as readonly TierLimit[]
  return { layer: 'app', tier: tierName, buckets: limits.map((limit) => ({ key: key + limit.keySuffix, named: limit.named, wholeCapacity: undefined })) }
}

function checkText (path: string, value: unknown): string {
  if (typeof value !== 'string' || value === '') expected(failOption, path, 'a non-empty string', value)
  return value
}

/** A user id or `edge.key` value: a non-empty string or a finite number, as the layers take them. */
function checkId (path: string, value: unknown): string {
  if (typeof value === 'number' && Number.isFinite(value)) return String(value)
  if (typeof value !== 'string' || value === '') expected(failOption, path, 'a non-empty string or a finite number', value)
  return value
}

/** The overdraft a cost gets on `bucket`: under a quota share, a cost above the share but within the whole quota. */
export function overdraftOf (m: Manual, bucket: ResolvedBucket, cost: number): boolean {
  return m.settings.quotaShare < 1 && bucket.wholeCapacity !== undefined && overdraws(cost, bucket.wholeCapacity)
}

/** `fastify.tollgate.peek`: what `consume` would decide now, without taking (every bucket named, read at once). */
export async function peek (m: Manual, target: unknown, policy: unknown, cost: unknown): Promise<PeekDecision> {
  const resolved = await resolve(m, target, policy)
  const amount = checkNumber(failOption, 'cost', cost, 0)
  const peekOf = storeMethod(storeOf(m.settings, resolved.layer), 'peek')
  const readings = await Promise.all(resolved.buckets.map(async (bucket) => peekOf({ key: bucket.key, policy: bucket.named.policy, cost: amount, overdraft: overdraftOf(m, bucket, amount) })))
  let retryAfterMs = 0
  for (const reading of readings) retryAfterMs = Math.max(retryAfterMs, reading.retryAfterMs)
  const decision: PeekDecision = {
    layer: resolved.layer,
    allowed: retryAfterMs === 0,
    cost: amount,
    retryAfterMs,
    buckets: readings.map((reading, i) => {
      const bucket = resolved.buckets[i] as ResolvedBucket
      return level(bucket, reading.policy ?? bucket.named.policy, reading.tokens, reading.fullInMs)
    })
  }
  if (resolved.tier !== undefined) decision.tier = resolved.tier
  return decision
}

/**
 * `fastify.tollgate.refund`: gives tokens back to every bucket named; the first
 * as it is then (a tier's first limit).
 */
export async function refund (m: Manual, target: unknown, policy: unknown, tokens: unknown): Promise<BucketLevel> {
  const resolved = await resolve(m, target, policy)
  // One key holds a user's bucket whatever the tier: refunded under another tier's
  // policy, it would be capped (and, once full, deleted) at the wrong capacity.
  const tiers = m.settings.app === undefined ? [] : Object.keys(m.settings.app.tiers)
  const named = target as { layer?: unknown, user?: unknown, tier?: unknown }
  if (typeof target === 'object' && named.layer === 'app' && named.user !== undefined && named.tier === undefined && tiers.length > 1) {
    failOption(`Expected \`bucket.tier\` in a refund: the app layer has several tiers (${tiers.join(', ')}), and a user's bucket is refunded under its own tier's capacity`)
  }
  const amount = checkNumber(failOption, 'tokens', tokens, 0)
  const refundOf = storeMethod(storeOf(m.settings, resolved.layer), 'refund')
  const left = await Promise.all(resolved.buckets.map(async (bucket) => refundOf({ key: bucket.key, policy: bucket.named.policy, cost: amount })))
  const first = resolved.buckets[0] as ResolvedBucket
  const applied = first.named.policy
  // A refund records its time: the wait until full is the tokens' alone.
  return level(first, applied, left[0] as number, read({ tokens: left[0] as number, lastMs: 0 }, applied, 0, 0).fullInMs)
}

/**
 * `fastify.tollgate.reset`: deletes every bucket named (full again). A user's
 * bucket named without a tier (nor a route) is the user's under every tier.
 */
export async function reset (m: Manual, target: unknown): Promise<void> {
  let keys = await resolveKeys(m, target)
  const named = target as { layer?: unknown, user?: unknown, tier?: unknown, route?: unknown } | null
  if (typeof named === 'object' && named !== null && named.layer === 'app' && named.user !== undefined && named.tier === undefined && named.route === undefined) {
    const tiers = Object.keys((m.settings.app as NonNullable<Settings['app']>).tiers)
    keys = [...new Set((await Promise.all(tiers.map(async (tier) => resolveKeys(m, { ...named, tier })))).flat())]
  }
  const layer = typeof target === 'object' && target !== null && (target as { layer?: unknown }).layer === 'edge' ? 'edge' : 'manual'
  const resetOf = storeMethod(storeOf(m.settings, layer), 'reset')
  await Promise.all(keys.map(async (key) => { await resetOf(key) }))
}

function level (bucket: ResolvedBucket, policy: BucketPolicy, tokens: number, fullInMs: number): BucketLevel {
  return { name: bucket.named.name, key: bucket.key, capacity: policy.capacity, refillPerSecond: policy.refillPerSecond, tokens, fullInMs }
}
