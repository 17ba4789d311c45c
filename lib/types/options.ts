/** The plugin's options, as users write them. Validation is in config/; these are the types alone. */
import type { FastifyRequest } from 'fastify'
import type { LimitDecision } from './decision.js'
import type { BucketPolicy } from './engine.js'
import type { Store } from './store.js'

/** One of several limits: a policy and its name in `RateLimit-Policy` and `RateLimit`. */
export interface NamedLimit extends BucketPolicy {
  /** 1 to 32 letters, digits, `_` or `-`, starting with a letter; unique in its list; not `edge` or `edge-route`. */
  readonly name: string
}

/** One policy (named `app` for a tier, `route` for a route quota in the headers), or a list of named limits. */
export type Quota = BucketPolicy | readonly NamedLimit[]


/** `per(count, period)`: a period by name, or a number of seconds. */
export type Period = 'second' | 'minute' | 'hour' | 'day' | 'week'

/** `edge.penalty`, `app.penalty`, `config.rateLimit.penalty`. */
export interface PenaltyOptions {
  /** Refusals that start a penalty: this many within `withinSeconds` (an integer ≥ 1). */
  after: number
  /** The window those refusals are counted in, in seconds (> 0). */
  withinSeconds: number
  /** How long the client is then refused, in seconds (≥ 1, at most 1e10). */
  seconds: number
  /** The status of refusals during a penalty: 429 (default, with `Retry-After`) or 403. */
  status?: 429 | 403 | undefined
}


/** Requests never limited: addresses and CIDR ranges, a predicate, or both. */
export type AllowListOption = readonly string[] | ((request: FastifyRequest) => boolean | PromiseLike<boolean>) | {
  /** IP addresses (`203.0.113.7`, `2001:db8::1`) and CIDR ranges (`10.0.0.0/8`, `2001:db8::/32`). */
  addresses?: readonly string[] | undefined
  /** Returns `true` (or a promise of `true`) for a request never limited; one that throws, rejects or is late does not allow. */
  match?: ((request: FastifyRequest) => boolean | PromiseLike<boolean>) | undefined
}


/**
 * `'draft'` (default): RateLimit and RateLimit-Policy; `'draft-03'`: RateLimit-Limit,
 * RateLimit-Remaining and RateLimit-Reset (@fastify/rate-limit's `enableDraftSpec`);
 * `'legacy'`: X-RateLimit-*; `false`: none.
 */
export type HeaderStyle = 'draft' | 'draft-03' | 'legacy' | false


/** `shadowReport`: how much `fastify.tollgate.shadowReport()` keeps. */
export interface ShadowReportOptions {
  /** Minutes the report covers, 1 to 60. Default 10. */
  minutes?: number | undefined
  /** Most clients listed per minute, 10 to 10 000 (and `minutes × keys` at most 100 000). Default 1 000. */
  keys?: number | undefined
}


/** The code of a misconfiguration warning (their texts: output/warnings.ts). */
export type WarningCode =
  | 'TOLLGATE_TRUST_PROXY_TRUE'
  | 'TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY'
  | 'TOLLGATE_ONLY_ANONYMOUS'
  | 'TOLLGATE_ROUTE_BEFORE_PLUGIN'
  | 'TOLLGATE_IDENTITY_QUOTA_IGNORED'
  | 'TOLLGATE_SHARED_STORE'
  | 'TOLLGATE_EDGE_MODE_LOCAL'
  | 'TOLLGATE_TIER_ABOVE_EDGE'
  | 'TOLLGATE_NO_ROUTES'

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
 *   settlements (see lib/stores/settling/index.ts).
 */
export type EdgeMode = 'exact' | 'replica-share' | 'settle'

/** How the edge knows a client. */
export interface EdgeKeyOptions {
  /**
   * The client's identity at the edge, e.g. an API-key header:
   * `(request) => request.headers['x-api-key']`. A non-empty string or a finite
   * number keys the bucket; anything else (`undefined`, `''`, the array of a
   * repeated header) or a throw falls back to the client IP. Default: the client
   * IP as Fastify resolves it (`trustProxy` respected). A promise is awaited (at
   * most `asyncTimeoutMs`; a rejection or a late answer: the client IP). Values
   * are stored and logged only as digests (see `keySecret`).
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
   * as set by `@fastify/jwt` after verification. `undefined` means anonymous. A
   * promise is awaited (at most `asyncTimeoutMs`; a rejection or a late answer: anonymous).
   */
  identify?: ((request: FastifyRequest) => Identity | undefined | PromiseLike<Identity | undefined>) | undefined
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
  /**
   * `true`: user ids go into store keys (and so into `onLimit`'s bucket keys and
   * the shadow report) as digests, HMAC-SHA256 with `edge.keySecret` when set, else
   * SHA-256, as `edge.key` values do: for ids that are secrets (API keys) or
   * personal data. Changing it gives every user a fresh bucket. Default `false`.
   */
  digestIds?: boolean | undefined
  /** Refuse a requester for a while after too many refusals by the app layer (see `PenaltyOptions`). Default: none. */
  penalty?: PenaltyOptions | undefined
  /**
   * `true` (default): the app layer applies to every route (but those whose
   * config says `app: false`). `false`: only to routes whose config names it:
   * `rateLimit: { app: true }`, or a `cost` or `quota`.
   */
  global?: boolean | undefined
}

/**
 * Capacity protection: a limit on the requests in flight in this process, cut
 * when a health signal is over its target and probed back up when they are all
 * under; requests over their tier's share of it are shed (503 with `Retry-After`),
 * the lowest priority first. At least one signal. See docs/protect.md.
 */
export interface ProtectOptions {
  /** Target for the event loop's p99 delay over each interval, in ms (`perf_hooks.monitorEventLoopDelay`). */
  eventLoopDelayMs?: number | undefined
  /** Target for the handler's mean latency per route over each interval, in ms, from the app layer's admission to the response's end (a route may set its own: `rateLimit.latencyMs`). */
  latencyMs?: number | undefined
  /** A gauge of yours and its target (> 0), read once per interval: e.g. `{ read: () => pool.waitingCount, target: 2 }` for a `pg` pool. */
  gauge?: { read: () => number, target: number } | undefined
  /** Every tier of `app.tiers`, highest priority first. Default: the other tiers in their order, then `default`, then `anonymous`. */
  priorities?: readonly string[] | undefined
  /** The limit's floor: it never sheds below this many requests in flight (an integer ≥ 1). Default 4. */
  minConcurrency?: number | undefined
  /** The limit's ceiling (an integer ≥ `minConcurrency`). Default 10 000. */
  maxConcurrency?: number | undefined
  /** Where the limit starts in a new process, before any signal was read (an integer from `minConcurrency` to `maxConcurrency`). Default 20, within those bounds. */
  initialConcurrency?: number | undefined
  /** How often the limit moves, in ms (10 to 60 000). Default 100. */
  intervalMs?: number | undefined
  /** The status of a shed request: 503 (default) or 429. */
  status?: 503 | 429 | undefined
}

export interface TollgateOptions {
  /**
   * A name for this registration, when several limit one app (a per-second and a
   * per-hour limiter, or one at the root and one in a plugin): 1 to 32 letters,
   * digits, `_` or `-`, starting with a letter, unique among the registrations of a
   * context and its parents. Its header members read `"<name>.edge"`, its store keys
   * `{…}:<name>.edge`, its metrics' `layer` label `<name>.edge`, and its API is
   * `fastify.tollgates.<name>` (a registration without a name is `fastify.tollgate`).
   */
  name?: string | undefined
  /** Where bucket state lives. Default: `memoryStore()`. Closed when the app closes. */
  store?: Store | undefined
  /** Per client IP (or key), in `onRequest`. Omitted or `false`: disabled. */
  edge?: EdgeOptions | false | undefined
  /** Per user, after authentication. Omitted or `false`: disabled. */
  app?: AppOptions | false | undefined
  /** Capacity protection: shed by tier when the service is overloaded (needs `app`). Omitted or `false`: disabled. */
  protect?: ProtectOptions | false | undefined
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
  /**
   * The longest wait, in ms (1 to 60 000), for a promise returned by one of your
   * functions (`edge.key`, the allow-list, `app.identify`, a route's cost or edge
   * key). A rejection or a late answer has the outcome of a throw (docs/manual.md,
   * "Async functions"). Default 1000.
   */
  asyncTimeoutMs?: number | undefined
  /**
   * `true`: each layer's decision is kept on the request, so that a handler reads
   * it with `fastify.tollgate.decision(request)` (the tokens left, without another
   * store call). Off by default: it costs about 1% of a request's instructions.
   */
  decisions?: boolean | undefined
  /** Called on every refusal (and would-be refusal in shadow mode). Errors it throws are logged. */
  onLimit?: ((request: FastifyRequest, decision: LimitDecision) => void) | undefined
  /**
   * Misconfiguration warnings (see output/warnings.ts), each logged once with its code.
   * `false` switches all off; `{ CODE: false }` one. Default: all on.
   */
  warnings?: false | Partial<Record<WarningCode, boolean>> | undefined
}

