/**
 * Type tests, checked by `tsc` as part of `npm test` (a type error fails the build).
 * Imports the package by name, so it checks the published declarations in dist/.
 */
import Fastify, { type FastifyRequest, type RouteShorthandOptions } from 'fastify'
import tollgate, { memoryStore, per, RateLimitedError, type Limiter, type LimiterDecision, type LimiterOptions, type NamedLimit, type Quota, type BucketLevel, type LayerBucket, type LimitDecision, type PeekDecision, type RouteCost, type Store, type TollgateOptions } from 'fastify-tollgate'
import { DECISION_CHANNEL, NEAR_LIMIT_LEFT, STORE_CHANNEL, type DecisionMessage, type DecisionOutcome, type ShadowReport, type StoreMessage } from 'fastify-tollgate'
import { tollgateMetrics, type TollgateMetrics } from 'fastify-tollgate/metrics'

const app = Fastify()

// Options are typed.
const options: TollgateOptions = {
  store: memoryStore({ clock: () => Date.now(), maxKeys: 1000, replicas: 3 }),
  edge: { capacity: 100, refillPerSecond: 50, key: (request) => request.headers['x-api-key'], ipv6Subnet: 56 },
  app: {
    tiers: { default: { capacity: 20, refillPerSecond: 5 }, vip: { capacity: 200, refillPerSecond: 50 } },
    identify: (request: FastifyRequest) => ({ id: String(request.headers['x-user']), tier: 'vip' }),
    hook: 'preValidation'
  },
  headers: 'legacy',
  shadow: true,
  onLimit: (_request, decision: LimitDecision) => { void decision.retryAfterMs }
}
void app.register(tollgate, options)
// edge.key takes what a header gives (string | string[] | undefined); keySecret is a string.
void app.register(tollgate, { edge: { capacity: 10, refillPerSecond: 1, key: (request) => request.headers['x-api-key'], keySecret: 'at-least-16-characters' } })
// @ts-expect-error: keySecret is a string
void app.register(tollgate, { edge: { capacity: 10, refillPerSecond: 1, keySecret: 42 } })
void app.register(tollgate, { edge: { capacity: 1, refillPerSecond: 0 }, app: false })

// An optional option may be given as `undefined` (exactOptionalPropertyTypes): it means the default.
const maybeClock: (() => number) | undefined = undefined
void app.register(tollgate, { store: memoryStore({ clock: maybeClock, maxKeys: undefined }), edge: { capacity: 1, refillPerSecond: 1, key: undefined }, headers: undefined })

// @ts-expect-error: a tier map needs `default`
const noDefault: TollgateOptions = { app: { tiers: { vip: { capacity: 1, refillPerSecond: 1 } } } }
// @ts-expect-error: capacity is a number
const stringCapacity: TollgateOptions = { edge: { capacity: '10', refillPerSecond: 1 } }
// @ts-expect-error: not a hook the app layer can run in
const badHook: TollgateOptions = { app: { tiers: { default: { capacity: 1, refillPerSecond: 1 } }, hook: 'onSend' } }
// @ts-expect-error: unknown option
const unknownOption: TollgateOptions = { edge: { capacity: 1, refillPerSecond: 1 }, limit: 5 }
// @ts-expect-error: settleIntervalMs goes with edge.mode 'settle' only
const intervalWithoutSettle: TollgateOptions = { edge: { capacity: 1, refillPerSecond: 1, mode: 'exact', settleIntervalMs: 50 } }
// @ts-expect-error: not an edge mode
const badMode: TollgateOptions = { edge: { capacity: 1, refillPerSecond: 1, mode: 'Settle' } }
void [noDefault, stringCapacity, badHook, unknownOption, intervalWithoutSettle, badMode]
// Edge modes: 'settle' with its interval, 'replica-share', also with `global: false`.
void app.register(tollgate, { edge: { capacity: 30, refillPerSecond: 10, mode: 'settle', settleIntervalMs: 50 } })
void app.register(tollgate, { edge: { global: false, mode: 'replica-share' } })
void app.tollgate.settle()

// Several limits per tier and per route quota; per(count, period); a quota carried by the identity.
const pricing: NamedLimit[] = [{ name: 'second', ...per(10, 'second') }, { name: 'hour', ...per(1000, 'hour') }, { name: 'day', ...per(20_000, 90_000) }]
void app.register(tollgate, {
  app: {
    tiers: { default: pricing, vip: { capacity: 200, refillPerSecond: 50 } },
    maxQuota: { capacity: 10_000, refillPerSecond: 1000 },
    quotaClaim: 'rateLimit',
    identify: (request) => ({ id: 'acme', quota: request.headers['x-deal'] === undefined ? undefined : { capacity: 500, refillPerSecond: 50 } })
  }
})
app.post('/bulk', { config: { rateLimit: { quota: { default: [{ name: 'bulk-hour', ...per(5, 'hour') }] } } } }, async () => 'ok')
const oneQuota: Quota = per(5, 'minute')
// @ts-expect-error: a limit in a list needs its name
const unnamed: TollgateOptions = { app: { tiers: { default: [{ capacity: 1, refillPerSecond: 1 }] } } }
// @ts-expect-error: not a period
per(5, 'fortnight')
void [oneQuota, unnamed]
void app.register(tollgate, { edge: { capacity: 10, refillPerSecond: 1, penalty: { after: 5, withinSeconds: 60, seconds: 300, status: 403 } } })
app.post('/login', { config: { rateLimit: { penalty: { after: 3, withinSeconds: 600, seconds: 3600 } } } }, async () => 'ok')
app.get('/open', { config: { rateLimit: { penalty: false } } }, async () => 'ok')
// @ts-expect-error: a penalty's status is 429 or 403
const teapot: TollgateOptions = { edge: { capacity: 1, refillPerSecond: 1, penalty: { after: 1, withinSeconds: 1, seconds: 1, status: 418 } } }
void teapot

// Route config is typed by declaration merging.
app.post('/export', { config: { rateLimit: { cost: 10 } } }, async () => 'ok')
app.post('/rows', { config: { rateLimit: { cost: (request) => Number(request.headers['x-rows'] ?? 1) } } }, async () => 'ok')
app.post('/report', { config: { rateLimit: { quota: { default: { capacity: 3, refillPerSecond: 0.05 }, vip: { capacity: 10, refillPerSecond: 1 } } } } }, async () => 'ok')
app.get('/health', { config: { rateLimit: false } }, async () => 'ok')
// @ts-expect-error: `true` is not a route config
const typedOptions: RouteShorthandOptions = { config: { rateLimit: true } }
// @ts-expect-error: cost is a number or a function
const typedCost: RouteShorthandOptions = { config: { rateLimit: { cost: '10' } } }
// @ts-expect-error: unknown route option
const typedUnknown: RouteShorthandOptions = { config: { rateLimit: { costs: 1 } } }
void [typedOptions, typedCost, typedUnknown]
// @ts-expect-error: a cost function returns a number
app.get('/c', { config: { rateLimit: { cost: () => 'ten' } } }, async () => 'ok')
// Inline in app.get(), Fastify infers the route's config type from the literal and
// intersects it with FastifyContextConfig, so a mistyped `rateLimit` there is not
// a compile error (it fails at startup instead: test/config/options.test.ts). Typed route
// options, as above, are checked.

// Handlers read the route config with its type.
app.get('/e', async (request) => {
  const config = request.routeOptions.config.rateLimit
  const cost: RouteCost | undefined = config === false || config === undefined ? undefined : config.cost
  // @ts-expect-error: cost is not a string
  const wrong: string | undefined = config === false || config === undefined ? undefined : config.cost
  return { cost: typeof cost, wrong }
})

// The decorator is typed.
async function manual (): Promise<boolean> {
  const decision = await app.tollgate.consume('jobs', { capacity: 5, refillPerSecond: 1 }, 2)
  // A key of one's own is a string or a number.
  await app.tollgate.consume(42, { capacity: 5, refillPerSecond: 1 })
  await app.tollgate.reset(42)
  // @ts-expect-error: the key is a string or a number
  await app.tollgate.consume(true, { capacity: 5, refillPerSecond: 1 })
  // Peek, refund and reset: a key of one's own with its policy, or a bucket a layer uses.
  const peeked: PeekDecision = await app.tollgate.peek('login:alice', { capacity: 5, refillPerSecond: 1 / 60 })
  const level: BucketLevel = await app.tollgate.refund({ layer: 'app', user: 42, tier: 'vip' }, 10)
  await app.tollgate.reset({ layer: 'app', user: 'alice', route: 'POST /export' })
  await app.tollgate.reset({ layer: 'edge', ip: '203.0.113.7' })
  await app.tollgate.consume({ layer: 'app', ip: '203.0.113.7' }, 2)
  app.get('/free', async (request) => app.tollgate.refund({ layer: 'edge', request }))
  const bucket: LayerBucket = { layer: 'edge', key: 'api-key' }
  void [peeked.buckets[0]?.fullInMs, level.fullInMs, bucket, new RateLimitedError(peeked)]
  // @ts-expect-error: a key of one's own needs its policy
  await app.tollgate.peek('login:alice')
  // @ts-expect-error: a layer's bucket takes no policy
  await app.tollgate.refund({ layer: 'app', user: '1' }, { capacity: 5, refillPerSecond: 1 })
  // @ts-expect-error: one requester only
  await app.tollgate.reset({ layer: 'app', user: '1', ip: '203.0.113.7' })
  // @ts-expect-error: an anonymous client's tier is the anonymous tier
  await app.tollgate.peek({ layer: 'app', ip: '203.0.113.7', tier: 'vip' })
  // @ts-expect-error: no such layer
  await app.tollgate.reset({ layer: 'route', user: '1' })
  return decision.allowed
}
void manual

// A limiter is a hook of onRequest, preValidation and preHandler, in route options, setNotFoundHandler and addHook.
async function limiters (): Promise<boolean> {
  const notFound: Limiter = app.tollgate.limiter({ name: 'not-found', ...per(10, 'minute') })
  app.setNotFoundHandler({ preHandler: notFound }, async (_request, reply) => reply.code(404).send())
  const otp = app.tollgate.limiter({ name: 'otp', capacity: 3, refillPerSecond: 3 / 60, penalty: { after: 3, withinSeconds: 60, seconds: 600, status: 403 } })
  app.get('/otp/send', { onRequest: otp }, async () => 'sent')
  app.post<{ Body: { account: string } }>('/login', { preValidation: [otp], preHandler: otp }, async (request) => request.body.account)
  app.addHook('onRequest', otp)
  const byUser = app.tollgate.limiter({
    name: 'by-user',
    capacity: 5,
    refillPerSecond: 1,
    key: async (request: FastifyRequest) => request.headers['x-user'] === undefined ? undefined : 42,
    cost: (request) => request.method === 'POST' ? 2 : 1,
    allowList: false
  })
  let decision: LimiterDecision | undefined
  app.get('/me', async (request) => { decision = await byUser.check(request); return decision.allowed })
  const options: LimiterOptions = { name: 'n', capacity: 1, refillPerSecond: 1, key: undefined, cost: undefined }
  // @ts-expect-error: a limiter has a name
  app.tollgate.limiter({ capacity: 1, refillPerSecond: 1 })
  // @ts-expect-error: a key function returns a string, a number or undefined
  app.tollgate.limiter({ name: 'n', capacity: 1, refillPerSecond: 1, key: () => ({ id: 1 }) })
  void options
  return decision?.allowListed === true || decision?.layer === 'limiter'
}
void limiters

// A custom store implements the contract; peek, refund and reset are optional.
const custom: Store = {
  consume: (buckets) => ({ allowed: true, tokens: buckets.map((bucket) => bucket.policy.capacity), retryAfterMs: 0 }),
  close: () => {}
}
const complete: Store = {
  ...custom,
  peek: async (bucket) => ({ tokens: bucket.policy.capacity, retryAfterMs: 0, fullInMs: 0 }),
  refund: (bucket) => bucket.policy.capacity,
  reset: async () => {}
}
void [custom, complete]

// Watching it: decision messages, the shadow report and its options, the metrics entry point.
void app.register(tollgate, { edge: { capacity: 5, refillPerSecond: 1 }, shadow: true, shadowReport: { minutes: 30, keys: 5000 } })
// @ts-expect-error: minutes is a number
void app.register(tollgate, { edge: { capacity: 5, refillPerSecond: 1 }, shadow: true, shadowReport: { minutes: '30' } })
const report: ShadowReport = app.tollgate.shadowReport({ top: 3 })
const flooder: { client: string, layer: 'edge' | 'app' | 'limiter' | 'protect', tier?: string, wouldRefuse: number, limits: Record<string, number> } | undefined = report.clients[0]
// @ts-expect-error: top is a number
app.tollgate.shadowReport({ top: 'all' })
const onDecision = (message: DecisionMessage): string => `${message.layer} ${message.outcome} ${message.route ?? '404'} ${message.storeMs}`
const onStore = (message: StoreMessage): number => message.liveReplicas
const outcome: DecisionOutcome = 'would-refuse'
// @ts-expect-error: not an outcome
const wrongOutcome: DecisionOutcome = 'denied'
const channels: [string, string, number] = [DECISION_CHANNEL, STORE_CHANNEL, NEAR_LIMIT_LEFT]
const metrics: TollgateMetrics = tollgateMetrics({ prefix: 'api_', maxRoutes: 20, latencyBuckets: [0.001, 0.01] })
metrics.close()
void [flooder, onDecision, onStore, outcome, wrongOutcome, channels]
