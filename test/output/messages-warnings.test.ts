/**
 * Golden messages, warnings: each code of WARNINGS triggered once, and the log
 * line it writes (level, code, message, details) byte for byte as today. Imports
 * only the public entry, so the test survives lib/ being moved around.
 */
import t from 'tap'
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import tollgate, { memoryStore, WARNINGS, type TollgateOptions } from '../../lib/index.js'
import { logSink } from '../helpers.js'

const EDGE = { capacity: 1e6, refillPerSecond: 1e6 }
const APP = { tiers: { default: { capacity: 1e6, refillPerSecond: 1e6 } } }

/** The warning lines (those with a code) an app writes while `setUp` runs; pino's time, pid and hostname left out. */
async function warningsOf (setUp: (app: FastifyInstance) => Promise<void>, server: FastifyServerOptions = {}): Promise<Array<Record<string, unknown>>> {
  const { lines, logger } = logSink()
  const app = Fastify({ ...server, logger })
  try {
    await setUp(app)
  } finally {
    await app.close()
  }
  return lines.filter((line) => line.code !== undefined).map(({ time: _time, pid: _pid, hostname: _hostname, ...rest }) => rest)
}

/** Registers the plugin with `options`, a route GET /, and waits for ready; then sends `requests`. */
const withPlugin = (options: TollgateOptions, requests: Array<{ url: string, headers?: Record<string, string> }> = []) => async (app: FastifyInstance): Promise<void> => {
  await app.register(tollgate, options)
  app.get('/', async () => 'ok')
  await app.ready()
  for (const request of requests) await app.inject(request)
}

const cases: Array<[code: keyof typeof WARNINGS, setUp: (app: FastifyInstance) => Promise<void>, server: FastifyServerOptions, line: Record<string, unknown>]> = [
  ['TOLLGATE_TRUST_PROXY_TRUE', withPlugin({ edge: EDGE }), { trustProxy: true }, {
    level: 40, code: 'TOLLGATE_TRUST_PROXY_TRUE',
    msg: "fastify-tollgate: trustProxy is true, so any client can choose the IP it is limited by (X-Forwarded-For). Set trustProxy to your proxies' addresses or CIDR ranges. (TOLLGATE_TRUST_PROXY_TRUE; switch off with warnings: { TOLLGATE_TRUST_PROXY_TRUE: false })"
  }],
  ['TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY', withPlugin({ edge: EDGE }, [{ url: '/', headers: { 'x-forwarded-for': '203.0.113.9' } }]), {}, {
    level: 40, code: 'TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY', ip: '127.0.0.1', forwardedFor: '203.0.113.9',
    msg: 'fastify-tollgate: A request came with X-Forwarded-For but trustProxy is off: if a proxy is in front, every client shares its address and its edge bucket. (TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY; switch off with warnings: { TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY: false })'
  }],
  ['TOLLGATE_ONLY_ANONYMOUS', withPlugin({ app: APP }, Array.from({ length: 1000 }, () => ({ url: '/' }))), {}, {
    level: 40, code: 'TOLLGATE_ONLY_ANONYMOUS', requests: 1000,
    msg: 'fastify-tollgate: The app layer has seen only anonymous requests so far: authentication probably runs after it (register it in an earlier hook, or set app.hook). (TOLLGATE_ONLY_ANONYMOUS; switch off with warnings: { TOLLGATE_ONLY_ANONYMOUS: false })'
  }],
  ['TOLLGATE_ROUTE_BEFORE_PLUGIN', async (app) => {
    app.get('/early', async () => 'early')
    await app.register(tollgate, { app: { ...APP, identify: () => ({ id: 'u' }) } })
    await app.ready()
    await app.inject('/early')
  }, {}, {
    level: 40, code: 'TOLLGATE_ROUTE_BEFORE_PLUGIN', route: 'GET /early',
    msg: "fastify-tollgate: A request reached a route declared before fastify-tollgate was loaded (register() not awaited, or the route declared first). Its app layer now runs in a global hook, before the route's own hooks, and its config.rateLimit was checked only now. Await register() before declaring routes. (TOLLGATE_ROUTE_BEFORE_PLUGIN; switch off with warnings: { TOLLGATE_ROUTE_BEFORE_PLUGIN: false })"
  }],
  ['TOLLGATE_IDENTITY_QUOTA_IGNORED', withPlugin({ app: { ...APP, identify: () => ({ id: 'u', quota: { capacity: 5, refillPerSecond: 1 } }) } }, [{ url: '/' }]), {}, {
    level: 40, code: 'TOLLGATE_IDENTITY_QUOTA_IGNORED',
    msg: 'fastify-tollgate: An identity carried a quota of its own, but app.maxQuota is not set: the quota was ignored and the tier applies. Set app.maxQuota (the largest quota an identity may carry) to honour such quotas. (TOLLGATE_IDENTITY_QUOTA_IGNORED; switch off with warnings: { TOLLGATE_IDENTITY_QUOTA_IGNORED: false })'
  }],
  ['TOLLGATE_SHARED_STORE', async (app) => {
    const store = memoryStore()
    await app.register(async (scope) => { await scope.register(tollgate, { store, edge: EDGE }); scope.get('/a', async () => 'a') })
    await app.register(async (scope) => { await scope.register(tollgate, { store, edge: EDGE }); scope.get('/b', async () => 'b') })
    await app.ready()
  }, {}, {
    level: 40, code: 'TOLLGATE_SHARED_STORE', prefix: '',
    msg: 'fastify-tollgate: Another fastify-tollgate registration uses the same store (or the same Redis client and prefix): their buckets share keys and drain each other. Give each its own store or prefix. (TOLLGATE_SHARED_STORE; switch off with warnings: { TOLLGATE_SHARED_STORE: false })'
  }],
  ['TOLLGATE_EDGE_MODE_LOCAL', withPlugin({ edge: { ...EDGE, mode: 'replica-share' } }), {}, {
    level: 40, code: 'TOLLGATE_EDGE_MODE_LOCAL', mode: 'replica-share',
    msg: 'fastify-tollgate: edge.mode is for a store the replicas share, but the store is the memory store: each replica counts alone (every edge mode is the same there). Pass store: redisStore(...) to share the quota, or leave edge.mode out. (TOLLGATE_EDGE_MODE_LOCAL; switch off with warnings: { TOLLGATE_EDGE_MODE_LOCAL: false })'
  }],
  ['TOLLGATE_NO_ROUTES', async (app) => {
    // A wrapper without fastify-plugin: the registration's context holds no route.
    await app.register(async (scope) => { await scope.register(tollgate, { name: 'inner', edge: EDGE }) })
    app.get('/', async () => 'ok')
    await app.ready()
  }, {}, {
    level: 40, code: 'TOLLGATE_NO_ROUTES', name: 'inner',
    msg: 'fastify-tollgate: This registration is in a context where no route was declared, so it limits nothing: a plugin that wraps its registration needs fastify-plugin, or register it where the routes are (or at the root). (TOLLGATE_NO_ROUTES; switch off with warnings: { TOLLGATE_NO_ROUTES: false })'
  }],
  ['TOLLGATE_TIER_ABOVE_EDGE', async (app) => {
    await app.register(tollgate, { edge: { capacity: 100, refillPerSecond: 100 / 60 }, app: { tiers: { default: { capacity: 60, refillPerSecond: 1 }, vip: { capacity: 300, refillPerSecond: 5 } } } })
    app.get('/reports/:id', async () => 'ok')
    await app.ready()
  }, {}, {
    level: 40, code: 'TOLLGATE_TIER_ABOVE_EDGE', tier: 'vip', route: 'GET /reports/:id', tierBurst: 300, edgeBurst: 100, tierPerSecond: 5, edgePerSecond: 100 / 60,
    msg: 'fastify-tollgate: A tier admits more requests on a route than the edge lets one client send there, so the edge caps it. Give the edge more, or give the route `rateLimit: { edge: false }` or `replace: true` with a bucket of its own. (TOLLGATE_TIER_ABOVE_EDGE; switch off with warnings: { TOLLGATE_TIER_ABOVE_EDGE: false })'
  }]
]

t.test('every warning, its log line byte-identical to today', async (t) => {
  t.same(cases.map(([code]) => code).sort(), Object.keys(WARNINGS).sort(), 'every code of WARNINGS has a case')
  for (const [code, setUp, server, line] of cases) {
    t.same(await warningsOf(setUp, server), [line], code)
  }
})
