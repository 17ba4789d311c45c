/**
 * Every warning this plugin logs, in one place: a misconfiguration that lets
 * clients escape or share a limit by accident. Each is logged once per
 * registration, at `warn`, with its `code`; `warnings: { CODE: false }` (or
 * `warnings: false`) switches it off.
 */
import type { FastifyBaseLogger, FastifyInstance, FastifyRequest } from 'fastify'
import type { WarningCode } from '../types/options.js'

export const WARNINGS = {
  /** At startup: `trustProxy: true` and a layer keys on client IPs. */
  TOLLGATE_TRUST_PROXY_TRUE:
    'trustProxy is true, so any client can choose the IP it is limited by (X-Forwarded-For). Set trustProxy to your proxies\' addresses or CIDR ranges.',
  /** At the first request carrying X-Forwarded-For while trustProxy is off. */
  TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY:
    'A request came with X-Forwarded-For but trustProxy is off: if a proxy is in front, every client shares its address and its edge bucket.',
  /** After `ONLY_ANONYMOUS_AFTER` app-layer requests, none with an identity. */
  TOLLGATE_ONLY_ANONYMOUS:
    'The app layer has seen only anonymous requests so far: authentication probably runs after it (register it in an earlier hook, or set app.hook).',
  /** At the first request to a route declared before the plugin was loaded (its app layer then runs in a global hook). */
  TOLLGATE_ROUTE_BEFORE_PLUGIN:
    'A request reached a route declared before fastify-tollgate was loaded (register() not awaited, or the route declared first). Its app layer now runs in a global hook, before the route\'s own hooks, and its config.rateLimit was checked only now. Await register() before declaring routes.',
  /** At the first request whose identity carried a quota while `app.maxQuota` is not set. */
  TOLLGATE_IDENTITY_QUOTA_IGNORED:
    'An identity carried a quota of its own, but app.maxQuota is not set: the quota was ignored and the tier applies. Set app.maxQuota (the largest quota an identity may carry) to honour such quotas.',
  /** At startup: a second registration in this process on the same store, or the same Redis client and prefix. */
  TOLLGATE_SHARED_STORE:
    'Another fastify-tollgate registration uses the same store (or the same Redis client and prefix): their buckets share keys and drain each other. Give each its own store or prefix.',
  /** At startup: `edge.mode` 'replica-share' or 'settle' on the memory store, which no replica shares. */
  TOLLGATE_EDGE_MODE_LOCAL:
    'edge.mode is for a store the replicas share, but the store is the memory store: each replica counts alone (every edge mode is the same there). Pass store: redisStore(...) to share the quota, or leave edge.mode out.',
  /** At `ready`: no route was declared in the registration's context (it was registered inside a plugin without fastify-plugin, say). */
  TOLLGATE_NO_ROUTES:
    'This registration is in a context where no route was declared, so it limits nothing: a plugin that wraps its registration needs fastify-plugin, or register it where the routes are (or at the root).',
  /** At startup, once: a tier admits more on a route than the edge lets one client through there. */
  TOLLGATE_TIER_ABOVE_EDGE:
    'A tier admits more requests on a route than the edge lets one client send there, so the edge caps it. Give the edge more, or give the route `rateLimit: { edge: false }` or `replace: true` with a bucket of its own.'
} as const satisfies Record<WarningCode, string>

/** App-layer requests without an identity before TOLLGATE_ONLY_ANONYMOUS is logged. */
export const ONLY_ANONYMOUS_AFTER = 1000

export const WARNING_CODES = Object.keys(WARNINGS) as WarningCode[]

/**
 * The warnings of one registration, each logged at most once, and the two
 * per-request checks, which cost a boolean test once they are done.
 */
export class Warnings {
  private readonly pending: Set<WarningCode>
  /** Still looking for an X-Forwarded-For header (trustProxy is off). */
  watchForwarded: boolean
  /** App-layer requests left to see before TOLLGATE_ONLY_ANONYMOUS; 0: not counting. */
  anonymousLeft: number

  constructor (private readonly log: FastifyBaseLogger, enabled: ReadonlySet<WarningCode>, trustProxy: unknown) {
    this.pending = new Set(enabled)
    if (trustProxy === true) this.warn('TOLLGATE_TRUST_PROXY_TRUE')
    this.watchForwarded = (trustProxy === undefined || trustProxy === false) && this.armed('TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY')
    this.anonymousLeft = this.armed('TOLLGATE_ONLY_ANONYMOUS') ? ONLY_ANONYMOUS_AFTER : 0
  }

  /** Warns at the first request that carries X-Forwarded-For while trustProxy is off. */
  checkForwarded (request: FastifyRequest): void {
    if (!this.watchForwarded || request.headers['x-forwarded-for'] === undefined) return
    this.watchForwarded = false
    this.warn('TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY', { ip: request.ip, forwardedFor: request.headers['x-forwarded-for'] })
  }

  /** The app layer decided for a request, anonymous or not. */
  sawRequester (anonymous: boolean): void {
    if (!anonymous) this.anonymousLeft = 0
    else if (--this.anonymousLeft === 0) this.warn('TOLLGATE_ONLY_ANONYMOUS', { requests: ONLY_ANONYMOUS_AFTER })
  }

  /** Whether `code` may still be logged (enabled and not logged yet). */
  armed (code: WarningCode): boolean {
    return this.pending.has(code)
  }

  /** Logs `code` once; `detail` is added to the log record. */
  warn (code: WarningCode, detail: Record<string, unknown> = {}): void {
    if (!this.pending.delete(code)) return
    this.log.warn({ code, ...detail }, `fastify-tollgate: ${WARNINGS[code]} (${code}; switch off with warnings: { ${code}: false })`)
  }
}

/** What `trustProxyOption` returns when Fastify's options cannot be read. */
export const TRUST_PROXY_UNKNOWN = Symbol('trustProxy unknown')

/**
 * Fastify keeps its server options under a symbol; read `trustProxy` from it
 * (`undefined` when not set; TRUST_PROXY_UNKNOWN if the options cannot be found).
 */
export function trustProxyOption (fastify: FastifyInstance): unknown {
  for (let object: object | null = fastify; object !== null; object = Object.getPrototypeOf(object) as object | null) {
    const key = Object.getOwnPropertySymbols(object).find((symbol) => symbol.description === 'fastify.options')
    if (key !== undefined) return ((object as Record<symbol, { trustProxy?: unknown } | undefined>)[key])?.trustProxy
  }
  return TRUST_PROXY_UNKNOWN
}

/** Stores in use by a registration of this process, by owner (a store, or a Redis client) and prefix. */
const inUse = new WeakMap<object, Map<string, number>>()

/**
 * Records that a registration uses `owner` + `prefix`; returns whether another
 * registration already does. `release` undoes it (on close).
 */
export function claimStore (owner: object, prefix: string): { shared: boolean, release: () => void } {
  let prefixes = inUse.get(owner)
  if (prefixes === undefined) inUse.set(owner, prefixes = new Map<string, number>())
  const count = prefixes.get(prefix) ?? 0
  prefixes.set(prefix, count + 1)
  return {
    shared: count > 0,
    release: () => {
      const left = (prefixes.get(prefix) as number) - 1
      if (left > 0) prefixes.set(prefix, left)
      else prefixes.delete(prefix)
    }
  }
}
