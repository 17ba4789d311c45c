/**
 * Every option, one row each: its name, its type and default as the docs show
 * them, and its doc line. The key lists that validation checks against
 * (`Unknown option ...`) are derived from these rows, and a test checks the
 * option tables of docs/options.md against them: an option added here is documented
 * there, and one removed here cannot linger there. The checks themselves are the
 * functions of config/ (one per option group), each naming the option it checks.
 */

export interface OptionRow {
  /** The option's path from its group: `edge.capacity`, `timeoutMs`, `rateLimit.cost`. */
  readonly name: string
  readonly type: string
  /** The default as the docs write it; `required` or `none` where there is none. */
  readonly default: string
  readonly doc: string
}

const row = (name: string, type: string, defaultValue: string, doc: string): OptionRow => ({ name, type, default: defaultValue, doc })

/** The plugin's options (`register(tollgate, options)`), groups first, then their members in the order checked. */
export const PLUGIN_OPTIONS: readonly OptionRow[] = [
  row('name', 'string', 'none', 'names a registration among several: its headers, keys, decorator and metrics'),
  row('store', 'Store', 'memoryStore()', 'where bucket state lives; closed when the app closes'),
  row('edge', 'object or false', 'disabled', 'the per-client bucket, in onRequest'),
  row('app', 'object or false', 'disabled', 'the per-user layer, after authentication'),
  row('protect', 'object or false', 'disabled', 'capacity protection: shed by tier when the service is overloaded (needs app)'),
  row('allowList', 'addresses, a predicate, or both', 'none', 'requests no layer limits'),
  row('headers', "'draft' | 'draft-03' | 'legacy' | false", "'draft'", 'which rate-limit headers to send'),
  row('shadow', 'boolean', 'false', 'decide, count and log, but never refuse'),
  row('shadowReport', '{ minutes?, keys? }', '{ minutes: 10, keys: 1000 }', 'what the shadow report keeps'),
  row('onLimit', '(request, decision) => void', 'none', 'called on every refusal'),
  row('warnings', 'false or { [code]: boolean }', 'all on', 'the misconfiguration warnings'),
  row('decisions', 'boolean', 'false', 'keep each layer\'s decision on the request, for fastify.tollgate.decision(request)'),
  row('asyncTimeoutMs', 'integer ms, 1 to 60 000', '1000', 'the longest wait for a promise from your functions'),
  row('edge.capacity', 'number from 1 to 1e12', 'required', 'burst, in tokens'),
  row('edge.refillPerSecond', 'number from 0 to 1e12', 'required', 'tokens per second'),
  row('edge.key', '(request) => unknown', 'client IP', "the client's identity at the edge"),
  row('edge.keySecret', 'string, ≥ 16 characters', 'none', 'the secret of the HMAC that hides key values'),
  row('edge.ipv6Subnet', 'integer 1–128', '64', 'IPv6 clients are grouped by this prefix'),
  row('edge.global', 'boolean', 'true', 'false: the edge runs only for routes with a bucket of their own'),
  row('edge.mode', "'exact' | 'replica-share' | 'settle'", "'exact'", 'how the edge uses a store shared by replicas'),
  row('edge.settleIntervalMs', 'integer ms, 1 to 60 000', '100', "time between two settlements (mode 'settle')"),
  row('edge.penalty', '{ after, withinSeconds, seconds, status? }', 'none', 'refuse a client for a while after too many refusals'),
  row('app.tiers', '{ default, [tier]: quota }', 'required', 'quotas by tier'),
  row('app.identify', '(request) => identity | undefined', 'JWT sub/tier', 'who the request is from'),
  row('app.hook', "'preHandler' | 'preValidation' | 'preParsing'", "'preHandler'", 'where the app layer runs'),
  row('app.global', 'boolean', 'true', 'false: only routes whose config names the app layer'),
  row('app.maxQuota', '{ capacity, refillPerSecond }', 'none', 'the largest quota an identity may carry'),
  row('app.quotaClaim', 'string', 'none', 'the JWT claim a quota is read from'),
  row('app.penalty', '{ after, withinSeconds, seconds, status? }', 'none', 'the penalty for the app layer'),
  row('app.digestIds', 'boolean', 'false', 'user ids in store keys as digests'),
  row('protect.eventLoopDelayMs', 'number of ms > 0', 'none', "target for the event loop's p99 delay"),
  row('protect.latencyMs', 'number of ms > 0', 'none', "target for the handler's mean latency, per route"),
  row('protect.gauge', '{ read: () => number, target }', 'none', 'a gauge of yours (a pool\'s waiting count) and its target'),
  row('protect.priorities', 'tier names, highest first', 'other tiers, default, anonymous', 'which tier is shed first (the last)'),
  row('protect.minConcurrency', 'integer ≥ 1', '4', 'the floor of the limit on requests in flight'),
  row('protect.maxConcurrency', 'integer ≥ minConcurrency', '10000', 'the ceiling of that limit'),
  row('protect.initialConcurrency', 'integer from minConcurrency to maxConcurrency', '20', 'where the limit starts in a new process'),
  row('protect.intervalMs', 'integer ms, 10 to 60 000', '100', 'how often the limit moves'),
  row('protect.status', '503 | 429', '503', 'the status of a shed request')
]

/** A route's `config.rateLimit`. */
export const ROUTE_OPTIONS: readonly OptionRow[] = [
  row('cost', 'number or (request) => number', '1', "tokens taken from the user's main bucket"),
  row('quota', '{ default, [tier]: quota }', 'none', "the route's own bucket per user"),
  row('edge', '{ capacity, refillPerSecond, key? } or false', 'none', "false: the edge leaves the route alone; a policy: the route's own edge bucket"),
  row('app', 'boolean', 'true', 'false: the app layer leaves the route alone'),
  row('penalty', '{ after, withinSeconds, seconds, status? } or false', 'none', "the route's own penalty"),
  row('replace', 'boolean', 'false', "true: the route's own buckets instead of the layers'"),
  row('critical', 'boolean', 'false', 'capacity protection sheds the route last, after every tier'),
  row('latencyMs', 'number of ms > 0', 'protect.latencyMs', "the route's own latency target for capacity protection"),
  row('edge.key', "'edge' | 'ip' | (request) => unknown", "'edge'", "the identity the route's edge bucket is kept by")
]

/** `fastify.tollgate.limiter(options)`. */
export const LIMITER_OPTIONS: readonly OptionRow[] = [
  row('name', 'string, 1–32 letters, digits, _ or -', 'required', 'its member name in the headers and its key space; unique in a registration'),
  row('capacity', 'number from 1 to 1e12', 'required', 'burst, in tokens'),
  row('refillPerSecond', 'number from 0 to 1e12', 'required', 'tokens per second'),
  row('key', '(request) => string | number | undefined, or a promise of one', 'client IP', 'who a request counts for'),
  row('cost', 'number, or (request) => number or a promise of one', '1', 'tokens a request takes'),
  row('penalty', '{ after, withinSeconds, seconds, status? }', 'none', 'refuse a client for a while after too many refusals'),
  row('allowList', 'boolean', 'true', "false: the plugin's allowList does not exempt from this limiter")
]

/** `memoryStore(options)`. */
export const MEMORY_STORE_OPTIONS: readonly OptionRow[] = [
  row('clock', '() => number', 'performance.now', 'returns milliseconds'),
  row('maxKeys', 'integer ≥ 1', '100000', 'most buckets kept'),
  row('replicas', 'integer ≥ 1', '1', 'this process is one of N that each keep their own state'),
  row('sweepIntervalMs', 'integer ms', '60000', 'how often full buckets are dropped')
]

/** `redisStore(options)`. */
export const REDIS_STORE_OPTIONS: readonly OptionRow[] = [
  row('client', 'ioredis Redis or Cluster', 'required', 'the client; yours, never closed by the store'),
  row('prefix', 'string without { or }', "'tollgate:'", 'key prefix'),
  row('timeoutMs', 'ms', '50', 'how long a call waits while Redis is silent'),
  row('failMode', "'open' | 'closed' | 'local'", "'local'", 'what to do when Redis cannot answer'),
  row('fallbackHeadroom', 'number ≥ 0', '0.2', "'local': the headroom of each replica's share"),
  row('replicas', 'integer ≥ 1', '1', 'live replicas assumed until the first heartbeat'),
  row('heartbeatIntervalMs', 'integer ms, 0 disables', '2000', 'how often a replica announces itself'),
  row('breakerThreshold', 'integer ≥ 1', '3', 'consecutive failed calls that open the breaker'),
  row('probeIntervalMs', 'ms', '1000', 'while open, how often one call probes Redis'),
  row('denyCacheSize', 'integer ≥ 0', '10000', 'refusals remembered locally; 0 disables'),
  row('maxBatch', 'integer 1 to 10 000', '500', 'most decisions in one script call'),
  row('neverFullTtlMs', 'integer ms', 'one day', 'TTL of a bucket that never refills'),
  row('logIntervalMs', 'ms', '10000', 'fewest ms between two log lines of one kind'),
  row('connectWaitMs', 'ms', '3000', 'at ready(), how long to wait for a client still connecting'),
  row('clock', '() => number', 'Redis TIME', 'tests only: the time passed to the script')
]

/** `shadowReport`, `*.penalty` and `allowList` as objects. */
export const SHADOW_REPORT_OPTIONS: readonly OptionRow[] = [
  row('minutes', 'integer 1 to 60', '10', 'minutes the report covers'),
  row('keys', 'integer 10 to 10 000', '1000', 'most clients listed per minute')
]
export const PENALTY_OPTIONS: readonly OptionRow[] = [
  row('after', 'integer ≥ 1', 'required', 'refusals that start a penalty'),
  row('withinSeconds', 'seconds > 0', 'required', 'the window those refusals are counted in'),
  row('seconds', 'seconds ≥ 1', 'required', 'how long the client is then refused'),
  row('status', '429 | 403', '429', 'the status of refusals during a penalty')
]
export const ALLOW_LIST_OPTIONS: readonly OptionRow[] = [
  row('addresses', 'string[]', 'none', 'IP addresses and CIDR ranges'),
  row('match', '(request) => boolean', 'none', 'a predicate of the request')
]

/** The names of the rows directly under `group` (`''`: the top level), in row order. */
export function keysOf (rows: readonly OptionRow[], group = ''): string[] {
  const prefix = group === '' ? '' : `${group}.`
  return rows.filter((option) => option.name.startsWith(prefix) && !option.name.slice(prefix.length).includes('.')).map((option) => option.name.slice(prefix.length))
}
