// One bench scenario as a fresh server process: node bench/server.js <scenario> <port> [redisPort]
// Prints "ready" when listening. A line "mark" on stdin starts the CPU count (after
// the warm-up); on SIGTERM it prints {"rss", "heapUsed", "arrayBuffers", "cpuUs"} and exits.
// Plain JavaScript: @fastify/rate-limit's route-config types clash with ours (TS2717).
import Fastify from 'fastify'
import { Redis } from 'ioredis'

const [scenario, port, redisPort] = process.argv.slice(2)
const ALL = 1e9 // a quota never reached: every request is allowed
// A quota spent at once that does not come back within a run (10 per hour): every
// request after the first 10 is refused, whatever the run's speed, so the refusal path
// does not depend on time (a refill per second let an allowed request in at a rate set
// by the machine's speed, and its first one deoptimized code mid-measurement).
const FLOOD = 10
const FLOOD_WINDOW_S = 3600
const HOUR_MS = 3_600_000

const redis = () => new Redis({ port: Number(redisPort), host: '127.0.0.1', enableOfflineQueue: true })

async function build () {
  const app = Fastify({ logger: false })
  const [name, layerSet] = scenario.split(':')
  // `both-settle`, `flood-share`…: the layers, then the edge mode (`edge.mode`) after the dash;
  // `both-metrics`: both layers, with fastify-tollgate/metrics subscribed (its cost per request);
  // `flood-handler`: the flood, with an error handler of the app's that shapes the refusal's body;
  // `both-protect`: both layers with capacity protection on (a gauge and the latency signal), shedding nothing.
  const [layers, modeName] = (layerSet ?? '').split('-')
  const edgeMode = { undefined: 'exact', settle: 'settle', share: 'replica-share' }[modeName]
  const useRedis = scenario.endsWith(':redis') // the store is the last part: floor:redis has no layer set
  const quota = layers === 'flood' ? FLOOD : ALL
  let client
  if (useRedis) {
    client = redis()
    await new Promise((resolve) => client.once('ready', resolve))
    app.addHook('onClose', async () => { client.disconnect() })
  }

  if (name === 'tollgate') {
    const { default: tollgate, memoryStore, redisStore } = await import('fastify-tollgate')
    // No sweep during a run: its first one (60 s) deoptimized consumeOne, a cost per minute, not per request.
    const store = useRedis ? redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: 1000 }) : memoryStore({ sweepIntervalMs: HOUR_MS })
    const refill = quota === ALL ? ALL : FLOOD / FLOOD_WINDOW_S
    // Settlements run on a timer, a cost per second, not per request. Under valgrind (bench:instructions)
    // a request takes about 50 times longer, so the default 100 ms would charge each request 50 times
    // its share: 5 s there.
    const settle = edgeMode === 'settle' && process.env.BENCH_UNDER_VALGRIND === '1' ? { settleIntervalMs: 5000 } : {}
    const options = { store, edge: { capacity: quota, refillPerSecond: refill, mode: edgeMode, ...settle } }
    if (layers === 'both') {
      options.app = { tiers: { default: { capacity: quota, refillPerSecond: refill } }, identify: (request) => ({ id: request.headers['x-user'] ?? 'anonymous' }) }
    }
    if (layers === 'keys') options.edge.key = (request) => request.headers['x-api-key']
    if (modeName === 'protect') {
      // Its interval's work is a cost per interval, not per request: 5 s under valgrind, as for settlements.
      const interval = process.env.BENCH_UNDER_VALGRIND === '1' ? { intervalMs: 5000 } : {}
      options.protect = { gauge: { read: () => 0, target: 10 }, latencyMs: 1000, maxConcurrency: 100_000, ...interval }
    }
    if (modeName === 'metrics') {
      const [{ tollgateMetrics }, { Registry }] = await Promise.all([import('fastify-tollgate/metrics'), import('prom-client')])
      tollgateMetrics({ registry: new Registry() })
    }
    if (modeName === 'handler') {
      app.setErrorHandler((error, request, reply) => {
        reply.code(error.statusCode ?? 500).send({ refused: error.code })
      })
    }
    await app.register(tollgate, options)
  } else if (name === 'frl') {
    const { default: rateLimit } = await import('@fastify/rate-limit')
    // A window of an hour: its reset (each window) deoptimized applyRateLimit, a cost per window, not per request.
    const options = { max: quota, timeWindow: quota === ALL ? HOUR_MS : FLOOD_WINDOW_S * 1000 }
    if (useRedis) options.redis = client
    if (layers === 'keys') {
      options.keyGenerator = (request) => request.headers['x-api-key']
      options.cache = 100_000
    }
    await app.register(rateLimit, options)
  } else if (name === 'rlf') {
    const { RateLimiterMemory, RateLimiterRedis } = await import('rate-limiter-flexible')
    const limiter = useRedis
      ? new RateLimiterRedis({ storeClient: client, points: quota, duration: quota === ALL ? HOUR_MS / 1000 : FLOOD_WINDOW_S })
      : new RateLimiterMemory({ points: quota, duration: quota === ALL ? HOUR_MS / 1000 : FLOOD_WINDOW_S })
    app.addHook('onRequest', async (request, reply) => {
      try {
        await limiter.consume(request.ip)
      } catch {
        reply.code(429).send({ statusCode: 429, error: 'Too Many Requests' })
        return reply
      }
    })
  } else if (name === 'floor' && layers === 'flood') {
    // What any limiter that refuses through Fastify's error handler (so that setErrorHandler
    // shapes the body) pays, with the headers a tollgate refusal carries: one hook, four
    // headers, an error without a stack trace, the same message (10 per hour: 360 s to the next token).
    const { default: createError } = await import('@fastify/error')
    const Refused = createError('FLOOR_RATE_LIMITED', 'Rate limit exceeded, retry in 360 seconds', 429, Error, false)
    app.addHook('onRequest', (request, reply, done) => {
      reply.header('ratelimit-policy', '"edge";q=10;w=360')
      reply.header('ratelimit', '"edge";r=0;t=360')
      reply.header('retry-after', 360)
      reply.header('cache-control', 'no-store')
      done(new Refused())
    })
  } else if (name === 'floor' && useRedis) {
    // What any limiter on Redis pays at least, per request: one EVALSHA of a trivial script on the
    // same ioredis client, from one hook, then the two headers with both members.
    client.defineCommand('benchFloor', { lua: 'return 1', numberOfKeys: 0 })
    app.addHook('onRequest', (request, reply, done) => {
      client.benchFloor().then(() => {
        reply.header('ratelimit-policy', '"edge";q=1000000000;w=1, "app";q=1000000000;w=1')
        reply.header('ratelimit', '"edge";r=999999999;t=0, "app";r=999999999;t=0')
        done()
      }, done)
    })
  } else if (name === 'floor') {
    // What any two-layer limiter pays in Fastify before deciding anything: a global
    // onRequest hook, a route-level preHandler hook, and the two headers with both members.
    app.addHook('onRequest', (request, reply, done) => {
      reply.header('ratelimit-policy', '"edge";q=1000000000;w=1')
      reply.header('ratelimit', '"edge";r=999999999;t=0')
      done()
    })
    app.addHook('onRoute', (routeOptions) => {
      routeOptions.preHandler = [(request, reply, done) => {
        reply.header('ratelimit-policy', `${reply.getHeader('ratelimit-policy')}, "app";q=1000000000;w=1`)
        reply.header('ratelimit', `${reply.getHeader('ratelimit')}, "app";r=999999999;t=0`)
        done()
      }]
    })
  } else if (name !== 'bare') {
    throw new Error(`unknown scenario ${scenario}`)
  }
  app.get('/', async () => ({ hello: 'world' }))
  return app
}

const app = await build()
await app.listen({ port: Number(port), host: '127.0.0.1' })
process.stdout.write('ready\n')
let mark = process.cpuUsage()
process.stdin.on('data', () => { mark = process.cpuUsage() })
process.once('SIGTERM', () => {
  const cpu = process.cpuUsage(mark)
  if (typeof globalThis.gc === 'function') globalThis.gc()
  const { rss, heapUsed, arrayBuffers } = process.memoryUsage()
  process.stdout.write(JSON.stringify({ rss, heapUsed, arrayBuffers, cpuUs: cpu.user + cpu.system }) + '\n')
  void app.close().then(() => process.exit(0))
})
