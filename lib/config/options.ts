/**
 * Plugin options and route config: their types, and their validation into the
 * settings the hooks use. Everything is checked at `register` and `onRoute`;
 * a mistake fails startup with a coded error, never a request.
 */
import type { FastifyRequest, RouteOptions } from 'fastify'
import type { BucketPolicy } from '../engine/bucket.js'
import { InvalidRouteConfigError } from '../output/errors.js'
import { HeaderLayout, namedPolicy, type HeaderStyle, type NamedPolicy } from '../output/headers.js'
import { bucketKey, clientAddress, keyDigest } from '../layers/keys.js'
import { memoize } from '../layers/key-cache.js'
import { checkAllowList, type AllowListOption, type AllowListSettings } from '../layers/allow-list.js'
import { checkQuota, namesOf, share, type Quota, type TierLimit } from './limits.js'
import { IdentityQuotas } from '../layers/identity-quota.js'
import { MAX_SHADOW_ENTRIES, ShadowCounter, type ShadowReportOptions } from '../output/shadow-report.js'
import { checkPenalty, type PenaltyOptions, type PenaltySettings, type Penalties } from '../layers/penalty.js'
import type { Store } from '../types/store.js'
import { WARNING_CODES, type WarningCode } from '../output/warnings.js'
import { MemoryStore } from '../stores/memory.js'
import { ReplicaShareEdge } from '../stores/replica-share.js'
import { SettlingEdge } from '../stores/settling.js'
import { performance } from 'node:perf_hooks'
import {
  checkFunction, checkInteger, checkKnownKeys, checkNumber, checkObject, checkPolicy, checkTiers,
  describe, expected, failOption, type Fail
} from './check.js'

/** Who made a request, as the app layer sees it. */
export interface Identity {
  /** A stable user id (the JWT `sub`): a non-empty string or a finite number. */
  id: string | number
  /** A tier name from `app.tiers`; unknown or missing means `default`. */
  tier?: string | undefined
  /**
   * A quota of this identity's own (a negotiated one), instead of its tier's: a
   * policy or a list of named limits, honoured with `app.maxQuota` and within it.
   * Malformed or above `app.maxQuota`: the `default` tier, logged (once a minute).
   * The route quotas that apply are still `tier`'s.
   */
  quota?: Quota | undefined
}

/**
 * Quotas by tier name: a policy, or a list of named limits consumed together
 * (`[{ name: 'second', ...per(10, 'second') }, { name: 'hour', ...per(1000, 'hour') }]`).
 * `default` is required, `anonymous` (optional) applies to unauthenticated requests.
 */
export type TierPolicies = { default: Quota } & Record<string, Quota>

/** The edge layer: a bucket per client for every request (`capacity`, `refillPerSecond`), or, with `global: false`, only the routes' own edge buckets. */
export type EdgeOptions = (GlobalEdgeOptions | RoutesOnlyEdgeOptions) & EdgeModeOptions

/** `edge.mode`, and `edge.settleIntervalMs` with `'settle'` only. */
export type EdgeModeOptions =
  | { mode?: 'exact' | 'replica-share' | undefined, settleIntervalMs?: never }
  | {
    mode: 'settle'
    /** Time between two settlements, in ms (an integer from 1 to 60 000). Default 100. */
    settleIntervalMs?: number | undefined
  }

export interface GlobalEdgeOptions extends BucketPolicy, EdgeKeyOptions {
  /** `true` (default): every request takes a token from the client's edge bucket. */
  global?: true | undefined
}

export interface RoutesOnlyEdgeOptions extends EdgeKeyOptions {
  /**
   * `false`: no edge bucket for every request; the edge runs only for routes with
   * a bucket of their own (`config.rateLimit.edge`), keyed like the edge.
   */
  global: false
  capacity?: never
  refillPerSecond?: never
}

/**
 * How the edge uses a store shared by replicas (`redisStore`); the memory store
 * never leaves the process, and every mode is the same there.
 * - `'exact'` (default): every request asks the shared store (one round trip);
 *   the replicas together admit exactly one quota.
 * - `'replica-share'`: no call to the store at all: each replica keeps the edge's
 *   buckets in memory with 1/N of each quota (N: the live replicas the store
 *   counts). A client pinned to one replica (one keep-alive connection behind an
 *   L4 balancer) gets 1/N of its quota.
 * - `'settle'`: no call per request: each replica spends tokens it reserved in the
 *   shared bucket, and settles with the store every `settleIntervalMs` (one call
 *   per node: spends, reservations). The replicas together admit one quota; a
 *   key's first requests at a replica spend up to max(1, B / N) before its first
 *   settlement, more than one quota only when others drained the key already. A
 *   pinned client gets max(1, B / N) at once, and its whole quota within a few
 *   settlements (see lib/stores/settling.ts).
 */
export type EdgeMode = 'exact' | 'replica-share' | 'settle'

/** How the edge knows a client. */
export interface EdgeKeyOptions {
  /**
   * The client's identity at the edge, e.g. an API-key header:
   * `(request) => request.headers['x-api-key']`. A non-empty string or a finite
   * number keys the bucket; anything else (`undefined`, `''`, the array of a
   * repeated header) or a throw falls back to the client IP. Default: the client
   * IP as Fastify resolves it (`trustProxy` respected). Values are stored and
   * logged only as digests (see `keySecret`).
   */
  key?: ((request: FastifyRequest) => unknown) | undefined
  /**
   * The secret of the HMAC-SHA256 that hides `key` values in store keys and logs:
   * a string of at least 16 characters, the same on every replica that shares a
   * store (changing it gives every key a fresh bucket). Default: none, and values
   * are hashed with plain SHA-256: never kept in clear, but whoever holds a store
   * dump or the logs can check a guessed key against them.
   */
  keySecret?: string | undefined
  /** IPv6 clients are grouped by this prefix length, in bits (1–128). Default 64. */
  ipv6Subnet?: number | undefined
  /** Refuse a client for a while after too many refusals at the edge (see `PenaltyOptions`). Default: none. */
  penalty?: PenaltyOptions | undefined
}

/** Where the app-layer hook runs: after the route's own hooks of that kind. */
export type AppHookName = 'preHandler' | 'preValidation' | 'preParsing'

export interface AppOptions {
  /** Policies by tier; `default` is required. Tier names match exactly, own properties only. */
  tiers: TierPolicies
  /**
   * Who the request is from. Default: `request.user.sub` and `request.user.tier`,
   * as set by `@fastify/jwt` after verification. `undefined` means anonymous.
   */
  identify?: ((request: FastifyRequest) => Identity | undefined) | undefined
  /** The hook the app layer runs in. Default `'preHandler'`. */
  hook?: AppHookName | undefined
  /**
   * The largest quota an identity may carry (`Identity.quota`): each of its limits'
   * capacity and refill at most these. Without it, identities' quotas are ignored
   * (the tier applies, and the first one seen is logged).
   */
  maxQuota?: BucketPolicy | undefined
  /**
   * The default `identify` (`request.user` of @fastify/jwt) takes an identity's quota
   * from this claim, e.g. `'rateLimit'` for `{ sub, tier, rateLimit: { capacity: 500, refillPerSecond: 50 } }`.
   * Needs `maxQuota`. Default: none.
   */
  quotaClaim?: string | undefined
  /** Refuse a requester for a while after too many refusals by the app layer (see `PenaltyOptions`). Default: none. */
  penalty?: PenaltyOptions | undefined
  /**
   * `true` (default): the app layer applies to every route (but those whose
   * config says `app: false`). `false`: only to routes whose config names it:
   * `rateLimit: { app: true }`, or a `cost` or `quota`.
   */
  global?: boolean | undefined
}

/** One bucket of a decision, as given to `onLimit` and returned by `tollgate.consume`. */
export interface BucketReport {
  /** The policy name in the headers: `edge`, `app`, `route`, or `manual`. */
  name: string
  /** The store key. */
  key: string
  capacity: number
  refillPerSecond: number
  /** Tokens left after the step (fractional). */
  tokens: number
}

/** What a layer decided for one request. */
export interface LimitDecision {
  layer: 'edge' | 'app' | 'manual'
  allowed: boolean
  /** The tier applied (app layer). */
  tier?: string
  /**
   * With a penalty configured, on a refusal that starts one (`'started'`: the
   * `after`-th refusal in the window) or one during it (`'in force'`), and its
   * length in seconds. `retryAfterMs` then runs to its end.
   */
  penalty?: { state: 'started' | 'in force', seconds: number }
  /** Tokens taken from the main bucket. */
  cost: number
  /** When refused: ms until the same request would pass (`Infinity`: never). 0 when allowed. */
  retryAfterMs: number
  buckets: BucketReport[]
}

export interface TollgateOptions {
  /** Where bucket state lives. Default: `memoryStore()`. Closed when the app closes. */
  store?: Store | undefined
  /** Per client IP (or key), in `onRequest`. Omitted or `false`: disabled. */
  edge?: EdgeOptions | false | undefined
  /** Per user, after authentication. Omitted or `false`: disabled. */
  app?: AppOptions | false | undefined
  /**
   * Requests never limited, by either layer: no bucket, no header. IP addresses
   * and CIDR ranges (IPv4 and IPv6) matched against the client address
   * (`request.ip`, as Fastify resolves it with `trustProxy`), a predicate of the
   * request (called by each layer; one that throws does not allow), or both as
   * `{ addresses, match }`.
   */
  allowList?: AllowListOption | undefined
  /** Which rate-limit headers to send. Default `'draft'`. */
  headers?: HeaderStyle | undefined
  /** Decide, count, send headers and log would-be refusals, but never refuse. Default `false`. */
  shadow?: boolean | undefined
  /**
   * In shadow mode, how much `fastify.tollgate.shadowReport()` keeps: the last
   * `minutes` (1 to 60, default 10), at most `keys` clients listed per minute (10
   * to 10 000, default 1 000; `minutes × keys` at most 100 000).
   */
  shadowReport?: ShadowReportOptions | undefined
  /** Called on every refusal (and would-be refusal in shadow mode). Errors it throws are logged. */
  onLimit?: ((request: FastifyRequest, decision: LimitDecision) => void) | undefined
  /**
   * Misconfiguration warnings (see warnings.ts), each logged once with its code.
   * `false` switches all off; `{ CODE: false }` one. Default: all on.
   */
  warnings?: false | Partial<Record<WarningCode, boolean>> | undefined
}

/** A route's cost: a number, or a function of the request returning a finite number ≥ 0. */
export type RouteCost = number | ((request: FastifyRequest) => number)

/** `config.rateLimit` of a route. */
export interface RouteRateLimit {
  /** Tokens taken from the user's main bucket (app layer). Default 1. */
  cost?: RouteCost | undefined
  /** The route's own bucket per user (one token per request), by tier; `default` is required. */
  quota?: TierPolicies | undefined
  /**
   * `false`: the edge layer leaves this route alone. A policy: the route's own
   * bucket at the edge (`edge-route` in the headers), per client like the edge's,
   * taken together with the client's edge bucket in `onRequest`, all or nothing:
   * `POST /login` at 5 a minute per IP, before authentication and body parsing.
   */
  edge?: BucketPolicy | false | undefined
  /** `false`: the app layer leaves this route alone. `true`: it applies (needed under `app.global: false`). */
  app?: boolean | undefined
  /**
   * A penalty of this route's own, for each layer that limits it, counted and kept
   * per route (`{ after, withinSeconds, seconds, status? }`), instead of the
   * layers' `penalty`; `false`: no penalty on this route.
   */
  penalty?: PenaltyOptions | false | undefined
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** fastify-tollgate: the route's cost, quotas and layers, or `false` to leave it out of both layers. */
    rateLimit?: RouteRateLimit | false | undefined
  }
}

export interface EdgeSettings {
  /** The client's edge bucket for every request; `undefined` under `edge.global: false`. */
  bucket: NamedPolicy | undefined
  key: ((request: FastifyRequest) => unknown) | undefined
  /** A `key` value → its bucket key, `{key:<digest>}:edge` (HMAC-SHA256 with `keySecret`, else SHA-256); cached. */
  keyOfValue: (value: string) => string
  /** `request.ip` → its bucket key, `{ip:<address>}:edge` (IPv6 by `ipv6Subnet`); cached. */
  keyOfAddress: (ip: string) => string
  ipv6Subnet: number
  /** The store the edge decides with: the plugin's store (`'exact'`), or a local one in front of it. */
  store: Store
  mode: EdgeMode
  penalty: PenaltySettings | undefined
}

export interface AppSettings {
  /** Tier name → its limits (one named `app` for a tier of one policy), each with this process's share (prototype-less). */
  tiers: Record<string, readonly TierLimit[]>
  /** The tier of requests with no verified identity: `anonymous` when configured, else `default`. */
  anonymousTier: string
  identify: ((request: FastifyRequest) => Identity | undefined) | undefined
  /** Checks identities' quotas against `app.maxQuota`; `undefined` without it. */
  identityQuotas: IdentityQuotas | undefined
  /** The claim of `request.user` the default `identify` reads a quota from. */
  quotaClaim: string | undefined
  penalty: PenaltySettings | undefined
  hook: AppHookName
  /** Whether the app layer applies to routes whose config does not name it. */
  global: boolean
  /** The store's quota share, applied to route quotas too. */
  quotaShare: number
  /**
   * `quotaShare < 1`: a cost the whole quota admits may exceed this process's share,
   * and the main bucket's request carries `overdraft` (see `BucketRequest`).
   */
  overdraft: boolean
}

export interface Settings {
  store: Store
  headers: HeaderStyle
  shadow: boolean
  onLimit: ((request: FastifyRequest, decision: LimitDecision) => void) | undefined
  edge: EdgeSettings | undefined
  app: AppSettings | undefined
  /** Whether a request is on the allow-list (never limited); `undefined` without one. */
  allowList: AllowListSettings | undefined
  /** The warnings switched on. */
  warnings: ReadonlySet<WarningCode>
  /** Counts refusals and starts penalties; set by the plugin when a layer or route has a penalty. */
  penalties?: Penalties | undefined
  /** Counts would-be refusals for `fastify.tollgate.shadowReport()`; `undefined` unless `shadow`. */
  shadowCounter: ShadowCounter | undefined
}

export interface RouteSettings {
  /** `POST /export`: names the route in logs and errors. */
  route: string
  /** `route:POST /export`: the name of the route's own bucket (see `routeBucket`). */
  bucket: string
  cost: RouteCost
  /** Tier name → the route's own limits (one named `route` for a quota of one policy); `undefined` without a route quota. */
  quota: Record<string, readonly TierLimit[]> | undefined
  /** Whether the edge layer applies to this route. */
  edge: boolean
  /** The route's own edge bucket, named `edge-route`; `undefined` without one. */
  edgeQuota: NamedPolicy | undefined
  /** The edge's buckets for this route (the client's, then the route's own), in header order; `undefined` when `edge` is false. */
  edgeLayout: HeaderLayout | undefined
  /** Whether the app layer applies to this route. */
  app: boolean
  /** The route's own penalty (keyed per route); `false`: none here; `undefined`: each layer's own. */
  penalty: PenaltySettings | false | undefined
}

/** A penalty is written to the store by a refund that takes tokens (see penalty.ts). */
const PENALTY_NEEDS_REFUND = 'Expected a store with `refund()` (as memoryStore and redisStore have) for a `penalty`: the penalty is kept in the store, got a store without'

const OPTION_KEYS = ['store', 'edge', 'app', 'allowList', 'headers', 'shadow', 'shadowReport', 'onLimit', 'warnings']
const HOOKS: readonly AppHookName[] = ['preHandler', 'preValidation', 'preParsing']

/** Checked tiers (see `checkTiers`), each a list of limits; a tier of one policy is one limit named `single`. */
function checkTierLimits (fail: Fail, path: string, value: unknown, single: string, quotaShare: number, separator?: string): Record<string, readonly TierLimit[]> {
  return checkTiers(fail, path, value, (at, quota) => checkQuota(fail, at, quota, single, (of, policy) => share(fail, of, policy, quotaShare), separator))
}

function checkStore (value: unknown): Store {
  if (value === undefined) return new MemoryStore()
  const store = (typeof value === 'object' && value !== null ? value : {}) as Partial<Store>
  if (typeof store.consume !== 'function' || typeof store.close !== 'function') {
    expected(failOption, 'store', 'a store with consume() and close(), such as memoryStore()', value)
  }
  const quotaShare = store.quotaShare ?? 1
  if (typeof quotaShare !== 'number' || !(quotaShare > 0 && quotaShare <= 1)) {
    expected(failOption, 'store.quotaShare', 'a number in (0, 1]', quotaShare)
  }
  return store as Store
}

function checkEdge (value: unknown, store: Store): EdgeSettings | undefined {
  if (value === undefined || value === false) return undefined
  const fail = failOption
  const quotaShare = store.quotaShare ?? 1
  const edge = checkObject(fail, 'edge', value)
  const keyOptions = ['key', 'keySecret', 'ipv6Subnet', 'global', 'mode', 'settleIntervalMs', 'penalty']
  if (edge.global !== undefined && typeof edge.global !== 'boolean') expected(fail, 'edge.global', 'a boolean', edge.global)
  let bucket: NamedPolicy | undefined
  if (edge.global === false) {
    checkKnownKeys(fail, 'edge', edge, keyOptions, ' (with `edge.global: false`, each route gives its own `rateLimit.edge` policy)')
  } else {
    bucket = namedPolicy('edge', share(fail, 'edge', checkPolicy(fail, 'edge', edge, keyOptions), quotaShare))
  }
  const digest = keyDigest(edge.keySecret === undefined ? undefined : checkKeySecret(edge.keySecret))
  const ipv6Subnet = edge.ipv6Subnet === undefined ? 64 : checkIpv6Subnet(edge.ipv6Subnet)
  return {
    bucket,
    key: edge.key === undefined ? undefined : checkFunction(fail, 'edge.key', edge.key),
    keyOfValue: memoize((value) => bucketKey('key', digest(value), 'edge')),
    keyOfAddress: memoize((ip) => bucketKey('ip', clientAddress(ip, ipv6Subnet), 'edge')),
    ipv6Subnet,
    penalty: edge.penalty === undefined ? undefined : checkPenalty(fail, 'edge.penalty', edge.penalty),
    ...checkEdgeMode(edge, store)
  }
}

/** The longest `edge.settleIntervalMs`: the edge's excess over one quota grows with it. */
const MAX_SETTLE_INTERVAL_MS = 60_000

/** `edge.mode` and `edge.settleIntervalMs`, and the store the edge decides with. */
function checkEdgeMode (edge: Record<string, unknown>, store: Store): { mode: EdgeMode, store: Store } {
  const fail = failOption
  const mode = edge.mode === undefined ? 'exact' : edge.mode
  if (mode !== 'exact' && mode !== 'replica-share' && mode !== 'settle') expected(fail, 'edge.mode', "'exact', 'replica-share' or 'settle'", mode)
  if (edge.settleIntervalMs !== undefined && mode !== 'settle') {
    const given = edge.mode === undefined ? "`edge.mode` left to its default, 'exact'" : `\`edge.mode: '${mode}'\``
    fail(`Expected \`edge.settleIntervalMs\` only with \`edge.mode: 'settle'\`, got it with ${given}`)
  }
  const intervalMs = checkInteger(fail, 'edge.settleIntervalMs', edge.settleIntervalMs ?? 100, 1)
  if (intervalMs > MAX_SETTLE_INTERVAL_MS) expected(fail, 'edge.settleIntervalMs', `an integer from 1 to ${MAX_SETTLE_INTERVAL_MS} (ms)`, intervalMs)
  // The memory store is local already: every mode decides in this process.
  if (mode === 'exact' || store instanceof MemoryStore) return { mode, store }
  const needs = mode === 'settle' ? '`liveReplicas` and `settle()`' : '`liveReplicas`'
  if (typeof store.liveReplicas !== 'number' || (mode === 'settle' && typeof store.settle !== 'function')) {
    fail(`Expected a store with ${needs} (as redisStore has) for \`edge.mode: '${mode}'\`, got a store without; with this store, use \`edge.mode: 'exact'\``)
  }
  const clock = store.localClock ?? ((): number => performance.now())
  const replicas = (): number => Math.max(1, Math.floor(store.liveReplicas as number))
  if (mode === 'replica-share') return { mode, store: new ReplicaShareEdge(replicas, clock) }
  return { mode, store: new SettlingEdge({ store: store as Store & Required<Pick<Store, 'settle'>>, replicas, intervalMs, clock }) }
}

/** At least 16 characters; the error never shows the value, which is a secret. */
function checkKeySecret (value: unknown): string {
  if (typeof value !== 'string' || value.length < 16) {
    const given = typeof value === 'string' ? `${value.length} characters` : `a value of type ${typeof value}`
    failOption(`Expected \`edge.keySecret\` to be a string of at least 16 characters, got ${given} (not shown: it is a secret)`)
  }
  return value
}

function checkIpv6Subnet (value: unknown): number {
  const bits = checkInteger(failOption, 'edge.ipv6Subnet', value, 1)
  if (bits > 128) expected(failOption, 'edge.ipv6Subnet', 'an integer from 1 to 128', value)
  return bits
}

function checkApp (value: unknown, quotaShare: number): AppSettings | undefined {
  if (value === undefined || value === false) return undefined
  const fail = failOption
  const app = checkObject(fail, 'app', value)
  checkKnownKeys(fail, 'app', app, ['tiers', 'identify', 'hook', 'global', 'maxQuota', 'quotaClaim', 'penalty'])
  if (app.global !== undefined && typeof app.global !== 'boolean') expected(fail, 'app.global', 'a boolean', app.global)
  const tiers = checkTierLimits(fail, 'app.tiers', app.tiers, 'app', quotaShare)
  const hook = app.hook ?? 'preHandler'
  if (!HOOKS.includes(hook as AppHookName)) expected(fail, 'app.hook', HOOKS.map((h) => `'${h}'`).join(', or '), hook)
  const maxQuota = app.maxQuota === undefined ? undefined : checkPolicy(fail, 'app.maxQuota', app.maxQuota)
  if (app.quotaClaim !== undefined && (typeof app.quotaClaim !== 'string' || app.quotaClaim === '')) expected(fail, 'app.quotaClaim', 'a non-empty string', app.quotaClaim)
  if (app.quotaClaim === 'sub' || app.quotaClaim === 'tier') expected(fail, 'app.quotaClaim', 'a claim other than `sub` and `tier` (they hold the id and the tier)', app.quotaClaim)
  if (app.quotaClaim !== undefined && app.identify !== undefined) {
    fail('Expected `app.quotaClaim` without `app.identify`: the claim is read by the default identify (`request.user`); with your own `identify`, return the quota as `quota`')
  }
  if (app.quotaClaim !== undefined && maxQuota === undefined) {
    fail('Expected `app.maxQuota` with `app.quotaClaim`: the largest quota a token may carry, e.g. `{ capacity: 10000, refillPerSecond: 1000 }`')
  }
  return {
    tiers,
    anonymousTier: 'anonymous' in tiers ? 'anonymous' : 'default',
    identify: app.identify === undefined ? undefined : checkFunction(fail, 'app.identify', app.identify),
    identityQuotas: maxQuota === undefined ? undefined : new IdentityQuotas(maxQuota, quotaShare),
    quotaClaim: app.quotaClaim,
    penalty: app.penalty === undefined ? undefined : checkPenalty(fail, 'app.penalty', app.penalty),
    hook: hook as AppHookName,
    global: app.global !== false,
    quotaShare,
    overdraft: quotaShare < 1
  }
}

/** Validates the plugin options (throws `TOLLGATE_INVALID_OPTION`). */
export function checkOptions (value: unknown): Settings {
  const fail = failOption
  const options = checkObject(fail, 'options', value)
  checkKnownKeys(fail, 'options', options, OPTION_KEYS)
  const store = checkStore(options.store)
  const quotaShare = store.quotaShare ?? 1
  const edge = checkEdge(options.edge, store)
  if (edge?.penalty !== undefined && edge.store !== store) {
    fail(`Expected \`edge.penalty\` with \`edge.mode: 'exact'\` (the penalty is kept in the shared store), got it with \`edge.mode: '${edge.mode}'\``)
  }
  const app = checkApp(options.app, quotaShare)
  if ((edge?.penalty ?? app?.penalty) !== undefined && typeof store.refund !== 'function') failOption(PENALTY_NEEDS_REFUND)
  if (edge === undefined && app === undefined) {
    fail('Expected at least one layer: `edge` or `app` must be set (both are omitted or `false`)')
  }
  const headers = options.headers ?? 'draft'
  if (headers !== 'draft' && headers !== 'legacy' && headers !== false) {
    expected(fail, 'headers', "'draft', 'legacy' or false", headers)
  }
  const shadow = options.shadow ?? false
  if (typeof shadow !== 'boolean') expected(fail, 'shadow', 'a boolean', shadow)
  const onLimit = options.onLimit === undefined ? undefined : checkFunction<Settings['onLimit']>(fail, 'onLimit', options.onLimit)
  const allowList = checkAllowList(options.allowList)
  const report = checkShadowReport(options.shadowReport)
  const shadowCounter = shadow ? new ShadowCounter(report.minutes, report.keys, store.localClock ?? ((): number => performance.now())) : undefined
  return { store, headers, shadow, onLimit, edge, app, allowList, warnings: checkWarnings(options.warnings), shadowCounter }
}

function checkShadowReport (value: unknown): { minutes: number, keys: number } {
  const fail = failOption
  const given = checkObject(fail, 'shadowReport', value ?? {})
  checkKnownKeys(fail, 'shadowReport', given, ['minutes', 'keys'])
  const minutes = checkInteger(fail, 'shadowReport.minutes', given.minutes ?? 10, 1, 60)
  const keys = checkInteger(fail, 'shadowReport.keys', given.keys ?? 1000, 10, 10_000)
  if (minutes * keys > MAX_SHADOW_ENTRIES) {
    fail(`Expected \`shadowReport.minutes\` × \`shadowReport.keys\` to be at most ${MAX_SHADOW_ENTRIES} (the clients kept in all), got ${minutes} × ${keys} = ${minutes * keys}`)
  }
  return { minutes, keys }
}

function checkWarnings (value: unknown): Set<WarningCode> {
  if (value === undefined || value === true) return new Set(WARNING_CODES)
  if (value === false) return new Set()
  const given = checkObject(failOption, 'warnings', value)
  checkKnownKeys(failOption, 'warnings', given, WARNING_CODES)
  for (const [code, on] of Object.entries(given)) {
    if (typeof on !== 'boolean' && on !== undefined) expected(failOption, `warnings.${code}`, 'a boolean', on)
  }
  return new Set(WARNING_CODES.filter((code) => given[code] !== false))
}

/** `POST /export`, or `GET,HEAD /items` for a route with several methods. */
export function routeName (routeOptions: Pick<RouteOptions, 'method' | 'url'>): string {
  const method = Array.isArray(routeOptions.method) ? routeOptions.method.join(',') : routeOptions.method
  return `${method} ${routeOptions.url}`
}

/**
 * `route:GET /report`, the name of a route's own bucket: one per route, and the
 * same for every way Fastify serves that route.
 * - HEAD counts as GET, and a route that serves GET is named after GET alone,
 *   whatever its other methods: Fastify answers HEAD with the GET route's handler
 *   (its automatic HEAD route, declared with the GET route's url, config and
 *   constraints), so `HEAD /report` spends the quota of the route serving
 *   `GET /report`, be it `GET` or `['GET', 'POST']`. An explicit HEAD route with a
 *   handler of its own spends that quota too, under its own `rateLimit` config: a
 *   HEAD is a GET without the body, and must not be a way around GET's quota
 *   (give both routes the same quota, or exempt the HEAD route). Other routes are
 *   named by their methods: `route:POST,PUT /items`.
 * - Trailing slashes are dropped (`/api/` is `/api`): a route `/` in a plugin with
 *   a prefix is served at both `/api` and `/api/`, and Fastify gives the second
 *   HEAD route an `onRoute` of its own.
 * - The route's constraints (`version`, `host`, custom ones), when it has any,
 *   are appended as `[host=api.example.com version=2.0.0]` (names sorted, values
 *   as `String()` gives them), so that routes at one URL keep their own quotas.
 *   A route declared before the plugin is named at its first request, where
 *   Fastify does not tell its constraints: such routes at one URL share one bucket.
 */
export function routeBucket (routeOptions: Pick<RouteOptions, 'method' | 'url'> & { constraints?: unknown }): string {
  const methods = (Array.isArray(routeOptions.method) ? routeOptions.method : [routeOptions.method]).map((method) => method === 'HEAD' ? 'GET' : method)
  const named = methods.includes('GET') ? 'GET' : [...new Set(methods)].join(',')
  const url = routeOptions.url.replace(/\/+$/, '') || '/'
  return `route:${named} ${url}${constraintsSuffix(routeOptions.constraints)}`
}

/** ` [host=api.example.com version=2.0.0]`, or `''` for a route without constraints. */
function constraintsSuffix (constraints: unknown): string {
  if (typeof constraints !== 'object' || constraints === null) return ''
  const entries = Object.entries(constraints).filter(([, value]) => value !== undefined)
  if (entries.length === 0) return ''
  return ` [${entries.map(([name, value]) => `${name}=${String(value)}`).sort().join(' ')}]`
}

/**
 * Validates a route's `config.rateLimit` (throws `TOLLGATE_INVALID_ROUTE_CONFIG`).
 * Returns `false` for a route left out of both layers. A numeric cost is checked
 * against the capacity of every tier it can run under (the whole quota, not this
 * process's share), since a cost above it could never pass.
 */
export function checkRouteConfig (routeOptions: Pick<RouteOptions, 'method' | 'url'> & { constraints?: unknown }, value: unknown, settings: Pick<Settings, 'edge' | 'app' | 'store'>): RouteSettings | false {
  const { edge, app } = settings
  const route = routeName(routeOptions)
  const bucket = routeBucket(routeOptions)
  const fail: Fail = (problem) => { throw new InvalidRouteConfigError(route, problem) }
  if (value === false) return false
  const config = value === undefined ? {} : checkObject(fail, 'rateLimit', value)
  checkKnownKeys(fail, 'rateLimit', config, ['cost', 'quota', 'edge', 'app', 'penalty'])
  if (config.app !== undefined && typeof config.app !== 'boolean') expected(fail, 'rateLimit.app', 'a boolean', config.app)
  const namesApp = config.app === true || config.cost !== undefined || config.quota !== undefined
  if (config.app === false && namesApp) {
    fail('`rateLimit.cost` and `rateLimit.quota` belong to the app layer, which `rateLimit.app: false` leaves out')
  }
  if (app === undefined && namesApp) {
    fail('`rateLimit.app`, `rateLimit.cost` and `rateLimit.quota` need the app layer, which is disabled (set the `app` option)')
  }
  const edgeQuota = checkRouteEdge(fail, config.edge, edge, settings.store.quotaShare ?? 1)
  const edgeBuckets = config.edge === false || edge === undefined ? [] : [edge.bucket, edgeQuota].filter((b) => b !== undefined)
  const settled = {
    route,
    bucket,
    edge: edgeBuckets.length > 0,
    edgeQuota,
    edgeLayout: edgeBuckets.length > 0 ? new HeaderLayout(edgeBuckets) : undefined,
    app: app !== undefined && config.app !== false && (app.global || namesApp),
    penalty: config.penalty === undefined ? undefined : config.penalty === false ? false as const : checkPenalty(fail, 'rateLimit.penalty', config.penalty)
  }
  if (settled.penalty !== undefined && settled.penalty !== false) {
    if (typeof settings.store.refund !== 'function') fail(PENALTY_NEEDS_REFUND)
    if (settled.edge && edge !== undefined && edge.store !== settings.store) {
      fail(`Expected \`rateLimit.penalty\` on a route the edge limits with \`edge.mode: 'exact'\` (the penalty is kept in the shared store), got \`edge.mode: '${edge.mode}'\` (or give the route \`edge: false\`)`)
    }
  }
  if (app === undefined) return { ...settled, cost: 1, quota: undefined }
  const cost = config.cost ?? 1
  if (typeof cost === 'number') {
    checkNumber(fail, 'rateLimit.cost', cost, 0)
    for (const tier of Object.keys(app.tiers)) {
      for (const limit of app.tiers[tier] as readonly TierLimit[]) {
        const capacity = limit.whole.capacity
        if (cost > capacity) {
          const above = (app.tiers[tier] as readonly TierLimit[]).length > 1
            ? `the capacity ${capacity} of tier \`${tier}\`'s limit \`${limit.named.name}\``
            : `tier \`${tier}\`'s capacity ${capacity}`
          fail(`Expected \`rateLimit.cost\` to be at most the capacity of every tier, got \`${cost}\` above ${above}: it could never pass`)
        }
      }
    }
  } else if (typeof cost !== 'function') {
    expected(fail, 'rateLimit.cost', 'a finite number ≥ 0 or a function of the request', cost)
  }
  let quota: Record<string, readonly TierLimit[]> | undefined
  if (config.quota !== undefined) {
    quota = checkTierLimits(fail, 'rateLimit.quota', config.quota, 'route', app.quotaShare, '#')
    for (const tier of Object.keys(quota)) {
      if (!(tier in app.tiers)) {
        fail(`Expected \`rateLimit.quota\` to name only tiers of \`app.tiers\` (${Object.keys(app.tiers).join(', ')}), got ${describe(tier)}`)
      }
    }
    // One step shows a tier's limits and the route's: a name must say which bucket it is.
    for (const tier of Object.keys(app.tiers)) {
      const tierNames = namesOf(app.tiers[tier] as readonly TierLimit[])
      const clash = namesOf((quota[tier] ?? quota.default) as readonly TierLimit[]).find((name) => tierNames.includes(name))
      if (clash !== undefined) {
        fail(`Expected the limits of \`rateLimit.quota\` to be named apart from tier \`${tier}\`'s limits (${tierNames.join(', ')}), got ${describe(clash)} in both` +
          ' (a tier of one policy is named `app`, a route quota of one policy `route`)')
      }
    }
  }
  return { ...settled, cost: cost as RouteCost, quota }
}

/** A route's own edge bucket (`rateLimit.edge` as a policy), named `edge-route`; `undefined` for none or `false`. */
function checkRouteEdge (fail: Fail, value: unknown, edge: EdgeSettings | undefined, quotaShare: number): NamedPolicy | undefined {
  if (value === undefined || value === false) return undefined
  if (edge === undefined) {
    fail('`rateLimit.edge` needs the edge layer, which is disabled (set the `edge` option; `edge: { global: false }` runs it only for routes with their own `rateLimit.edge`)')
  }
  if (value === true) expected(fail, 'rateLimit.edge', 'false or a policy { capacity, refillPerSecond }', value)
  return namedPolicy('edge-route', share(fail, 'rateLimit.edge', checkPolicy(fail, 'rateLimit.edge', value), quotaShare))
}
