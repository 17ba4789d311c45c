/** fastify-tollgate/metrics: Prometheus metrics from the diagnostics channels (lib/metrics.ts). */
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import { Registry } from 'prom-client'
import t from 'tap'
import tollgate, { redisStore } from '../lib/index.js'
import { OTHER_ROUTE, tollgateMetrics, UNMATCHED_ROUTE } from '../lib/metrics.js'
import { buildApp } from './helpers.js'
import { requireRedis, startRedis } from './redis-server.js'
import { runExample } from './run-example.js'

interface Sample { name: string, labels: Record<string, string>, value: number }

/** Parses a Prometheus text exposition (format 0.0.4): its samples and the TYPE of each metric; throws on a line it cannot read. */
function parseExposition (text: string): { samples: Sample[], types: Map<string, string> } {
  const samples: Sample[] = []
  const types = new Map<string, string>()
  for (const line of text.split('\n')) {
    if (line === '') continue
    const type = /^# TYPE (\w+) (counter|gauge|histogram|summary|untyped)$/.exec(line)
    if (type !== null) { types.set(type[1] as string, type[2] as string); continue }
    if (line.startsWith('# HELP ')) continue
    const sample = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (sample === null) throw new Error(`not an exposition line: ${line}`)
    const labels: Record<string, string> = {}
    for (const [, key, value] of (sample[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[key as string] = (value as string).replace(/\\(.)/g, (_, c: string) => c === 'n' ? '\n' : c)
    }
    const value = sample[3] === '+Inf' ? Infinity : Number(sample[3])
    if (Number.isNaN(value)) throw new Error(`not a number: ${line}`)
    samples.push({ name: sample[1] as string, labels, value })
  }
  return { samples, types }
}

/** The sum of the samples named `name` whose labels include `where`. */
function sum (samples: Sample[], name: string, where: Record<string, string> = {}): number {
  return samples
    .filter((s) => s.name === name && Object.entries(where).every(([k, v]) => s.labels[k] === v))
    .reduce((total, s) => total + s.value, 0)
}

t.test('npm run example metrics: a scrape over HTTP parses, and its counters match the requests sent', async (t) => {
  const { url } = await runExample(t, 'metrics')
  const token = (await (await fetch(`${url}/token?user=alice`)).json() as { token: string }).token
  const codes: number[] = []
  for (let i = 0; i < 12; i++) codes.push((await fetch(`${url}/`)).status)
  for (let i = 0; i < 3; i++) codes.push((await fetch(`${url}/export`, { method: 'POST', headers: { authorization: `Bearer ${token}` } })).status)
  codes.push((await fetch(`${url}/nowhere`)).status)
  const refusedGets = codes.slice(0, 12).filter((c) => c === 429).length
  const refusedExports = codes.slice(12, 15).filter((c) => c === 429).length
  t.ok(refusedGets >= 1, `anonymous GET / refused ${refusedGets} of 12`)
  t.equal(refusedExports, 1, 'the third export is refused')
  t.equal(codes[15], 404)

  const response = await fetch(`${url}/metrics`)
  t.equal(response.status, 200)
  t.match(response.headers.get('content-type'), /^text\/plain; version=0\.0\.4/)
  t.notOk(response.headers.has('ratelimit'), '/metrics is exempt')
  const { samples, types } = parseExposition(await response.text())
  t.equal(types.get('tollgate_decisions_total'), 'counter')
  t.equal(types.get('tollgate_store_duration_seconds'), 'histogram')
  t.equal(types.get('tollgate_store_degraded'), 'gauge')
  t.equal(types.get('tollgate_live_replicas'), 'gauge')
  const decisions = 'tollgate_decisions_total'
  t.equal(sum(samples, decisions, { layer: 'edge' }), 16, 'the edge decided every request but /token and /metrics')
  t.equal(sum(samples, decisions, { layer: 'edge', outcome: 'refused' }), 0)
  t.equal(sum(samples, decisions, { layer: 'edge', route: UNMATCHED_ROUTE }), 1, 'the 404')
  t.equal(sum(samples, decisions, { layer: 'app', tier: 'anonymous', route: 'GET /' }), 12)
  t.equal(sum(samples, decisions, { layer: 'app', tier: 'anonymous', route: 'GET /', outcome: 'refused' }), refusedGets)
  t.equal(sum(samples, decisions, { layer: 'app', tier: 'default', route: 'POST /export' }), 3)
  t.equal(sum(samples, decisions, { layer: 'app', tier: 'default', route: 'POST /export', outcome: 'refused' }), 1)
  t.equal(sum(samples, decisions, { layer: 'app', outcome: 'would-refuse' }), 0)
  t.equal(sum(samples, 'tollgate_store_duration_seconds_count', { layer: 'edge' }), 16, 'the latency of each decision')
  t.equal(sum(samples, 'tollgate_store_duration_seconds_count', { layer: 'app' }), 15)
  t.equal(sum(samples, 'tollgate_store_duration_seconds_bucket', { layer: 'app', le: '+Inf' }), 15)
  const labels = new Set(samples.filter((s) => s.name === decisions).map((s) => s.labels.route))
  t.same([...labels].sort(), ['GET /', 'POST /export', UNMATCHED_ROUTE].sort(), 'routes by their pattern only')
})

t.test('outcomes, shadow, penalties, and routes past maxRoutes', async (t) => {
  const registry = new Registry()
  const metrics = tollgateMetrics({ registry, maxRoutes: 2, prefix: 'rl_' })
  t.teardown(() => { metrics.close() })
  const { app } = await buildApp({ edge: { capacity: 2, refillPerSecond: 0, penalty: { after: 2, withinSeconds: 60, seconds: 60 } } })
  for (const path of ['/a', '/b', '/c', '/d']) app.get(path, async () => 'ok')
  t.same([(await app.inject('/a')).statusCode, (await app.inject('/b')).statusCode, (await app.inject('/c')).statusCode, (await app.inject('/d')).statusCode, (await app.inject('/d')).statusCode],
    [200, 200, 429, 429, 429])
  const { samples } = parseExposition(await registry.metrics())
  t.same(samples.filter((s) => s.name === 'rl_decisions_total').map((s) => [s.labels.route, s.labels.outcome, s.value]), [
    ['GET /a', 'allowed', 1],
    ['GET /b', 'near-limit', 1],
    [OTHER_ROUTE, 'refused', 3]
  ])
  t.equal(sum(samples, 'rl_penalties_started_total', { layer: 'edge' }), 1)
  await app.close()

  const shadow = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 }, shadow: true })
  shadow.app.get('/a', async () => 'ok')
  await shadow.app.inject('/a')
  await shadow.app.inject('/a')
  t.equal(sum(parseExposition(await registry.metrics()).samples, 'rl_decisions_total', { outcome: 'would-refuse', route: 'GET /a' }), 1)
  await shadow.app.close()
})

t.test("a limiter's decisions: layer limiter, its latency and its penalties", async (t) => {
  const registry = new Registry()
  const metrics = tollgateMetrics({ registry })
  t.teardown(() => { metrics.close() })
  const { app } = await buildApp({ edge: { capacity: 100, refillPerSecond: 10 } })
  t.teardown(() => app.close())
  const otp = app.tollgate.limiter({ name: 'otp', capacity: 1, refillPerSecond: 0, penalty: { after: 1, withinSeconds: 60, seconds: 60 } })
  app.setNotFoundHandler({ preHandler: otp }, async (_request, reply) => reply.code(404).send())
  t.same([(await app.inject('/x')).statusCode, (await app.inject('/x')).statusCode], [404, 429])
  const { samples } = parseExposition(await registry.metrics())
  t.same(samples.filter((s) => s.name === 'tollgate_decisions_total' && s.labels.layer === 'limiter').map((s) => [s.labels.tier, s.labels.route, s.labels.outcome, s.value]), [
    ['', UNMATCHED_ROUTE, 'near-limit', 1],
    ['', UNMATCHED_ROUTE, 'refused', 1]
  ])
  t.equal(sum(samples, 'tollgate_store_duration_seconds_count', { layer: 'limiter' }), 2)
  t.equal(sum(samples, 'tollgate_penalties_started_total', { layer: 'limiter' }), 1)
})

t.test('close(): stops counting and frees the names', async (t) => {
  const registry = new Registry()
  const first = tollgateMetrics({ registry })
  t.throws(() => tollgateMetrics({ registry }), { code: 'TOLLGATE_INVALID_OPTION', message: /without `tollgate_decisions_total`: tollgateMetrics\(\) was called on it already/ }, 'one set of metrics per registry')
  t.equal((await registry.getMetricsAsJSON()).length, 9, 'and the refused call registered nothing')
  const other = tollgateMetrics({ registry, prefix: 'other_' })
  t.equal((await registry.getMetricsAsJSON()).length, 18, 'another prefix is another set')
  other.close()
  first.close()
  t.equal((await registry.getMetricsAsJSON()).length, 0)
  const { app } = await buildApp({ edge: { capacity: 5, refillPerSecond: 1 } })
  app.get('/', async () => 'ok')
  await app.inject('/')
  const second = tollgateMetrics({ registry })
  await app.inject('/')
  t.equal(sum(parseExposition(await registry.metrics()).samples, 'tollgate_decisions_total'), 1, 'only what came after')
  first.close() // again: must not remove the second's metrics
  t.equal((await registry.getMetricsAsJSON()).length, 9, 'a second close() of the first leaves the second alone')
  second.close()
  await app.close()
})

t.test('metrics made after a store degraded show it at once', async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const client = new Redis({ port: server.port, retryStrategy: () => 50 })
  client.on('error', () => {})
  const app = Fastify()
  await app.register(tollgate, { store: redisStore({ client, prefix: 'late-metrics:', timeoutMs: 50, probeIntervalMs: 100, heartbeatIntervalMs: 0, breakerThreshold: 1 }), edge: { capacity: 100, refillPerSecond: 1 } })
  app.get('/', async () => 'ok')
  await app.ready()
  t.teardown(async () => { server.resume(); await app.close(); client.disconnect() })
  server.pause()
  t.equal((await app.inject('/')).statusCode, 200, 'decided by failMode: the breaker opens')
  const registry = new Registry()
  const metrics = tollgateMetrics({ registry })
  t.teardown(() => { metrics.close() })
  const degraded = async (): Promise<number | undefined> =>
    parseExposition(await registry.metrics()).samples.find((s) => s.name === 'tollgate_store_degraded' && s.labels.prefix === 'late-metrics:')?.value
  t.equal(await degraded(), 1, 'degraded, though it happened before the metrics')
  server.resume()
  const deadline = performance.now() + 5000
  while (performance.now() < deadline && await degraded() !== 0) { await app.inject('/'); await new Promise((resolve) => setTimeout(resolve, 20)) }
  t.equal(await degraded(), 0, 'restored')
  await app.close()
  t.equal(await degraded(), undefined, 'closed: no series')
})

t.test('invalid options fail with a coded error naming them', async (t) => {
  const cases: Array<[unknown, RegExp]> = [
    [{ registry: {} }, /`tollgateMetrics\.registry\.registerMetric`/],
    [{ registry: 'default' }, /`tollgateMetrics\.registry`/],
    [{ prefix: 'rate-limit_' }, /`tollgateMetrics\.prefix`.*rate-limit_/],
    [{ maxRoutes: 0 }, /`tollgateMetrics\.maxRoutes`.*got `0`/],
    [{ latencyBuckets: [] }, /`tollgateMetrics\.latencyBuckets`/],
    [{ latencyBuckets: [0.1, 0.05] }, /`tollgateMetrics\.latencyBuckets\[1\]`.*above the one before.*0\.05/],
    [{ latencyBuckets: [-1] }, /`tollgateMetrics\.latencyBuckets\[0\]`/],
    [{ buckets: [1] }, /buckets/],
    ['yes', /`tollgateMetrics`/]
  ]
  for (const [options, message] of cases) {
    t.throws(() => tollgateMetrics(options as never), { code: 'TOLLGATE_INVALID_OPTION', message }, JSON.stringify(options))
  }
  const registry = new Registry()
  tollgateMetrics({ registry, latencyBuckets: [0.001, 1] }).close()
  t.pass('custom buckets accepted')
})

t.test('Redis store: live replicas and degraded gauges from the heartbeat and the breaker', async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const registry = new Registry()
  const metrics = tollgateMetrics({ registry })
  t.teardown(() => { metrics.close() })
  const clients = [new Redis({ port: server.port, retryStrategy: () => 50 }), new Redis({ port: server.port, retryStrategy: () => 50 })]
  const apps: FastifyInstance[] = []
  for (const client of clients) {
    client.on('error', () => {})
    const app = Fastify()
    await app.register(tollgate, {
      store: redisStore({ client, prefix: 'gauges:', timeoutMs: 50, probeIntervalMs: 100, heartbeatIntervalMs: 100, breakerThreshold: 1 }),
      edge: { capacity: 100, refillPerSecond: 1 }
    })
    app.get('/', async () => 'ok')
    await app.ready()
    apps.push(app)
  }
  t.teardown(async () => { server.resume(); for (const app of apps) await app.close(); for (const client of clients) client.disconnect() })
  const gauge = async (name: string): Promise<number | undefined> =>
    parseExposition(await registry.metrics()).samples.find((s) => s.name === name && s.labels.store === 'redis' && s.labels.prefix === 'gauges:')?.value
  const until = async (name: string, value: number, poke = async (): Promise<unknown> => undefined): Promise<number | undefined> => {
    const deadline = performance.now() + 5000
    while (performance.now() < deadline && await gauge(name) !== value) { await poke(); await new Promise((resolve) => setTimeout(resolve, 20)) }
    return gauge(name)
  }
  t.equal(await until('tollgate_live_replicas', 2), 2, 'two replicas counted')
  t.equal(await gauge('tollgate_store_degraded'), 0, 'healthy')
  server.pause()
  t.equal(await until('tollgate_store_degraded', 1, () => (apps[0] as FastifyInstance).inject('/')), 1, 'degraded while Redis is frozen')
  server.resume()
  t.equal(await until('tollgate_store_degraded', 0, () => (apps[0] as FastifyInstance).inject('/')), 0, 'restored')
  await (apps[1] as FastifyInstance).close()
  t.equal(await gauge('tollgate_live_replicas'), 2, 'one store closed: the other still shows its count')
  await (apps[0] as FastifyInstance).close()
  t.equal(await gauge('tollgate_store_degraded'), undefined, 'every store closed: no series left')
  t.equal(await gauge('tollgate_live_replicas'), undefined)
})

t.test('two stores of one prefix on two Redis servers: degraded while either is', async (t) => {
  if (!requireRedis(t)) return
  const servers = [await startRedis(t), await startRedis(t)]
  const registry = new Registry()
  const metrics = tollgateMetrics({ registry })
  t.teardown(() => { metrics.close() })
  const apps: FastifyInstance[] = []
  for (const server of servers) {
    const client = new Redis({ port: server.port, retryStrategy: () => 50 })
    client.on('error', () => {})
    const app = Fastify()
    await app.register(tollgate, { store: redisStore({ client, timeoutMs: 50, probeIntervalMs: 100, heartbeatIntervalMs: 100, breakerThreshold: 1 }), edge: { capacity: 100, refillPerSecond: 1 } })
    app.get('/', async () => 'ok')
    await app.ready()
    apps.push(app)
    t.teardown(async () => { server.resume(); await app.close(); client.disconnect() })
  }
  const degraded = async (): Promise<number | undefined> =>
    parseExposition(await registry.metrics()).samples.find((s) => s.name === 'tollgate_store_degraded' && s.labels.prefix === 'tollgate:')?.value
  const until = async (value: number, poke: () => Promise<unknown>): Promise<number | undefined> => {
    const deadline = performance.now() + 5000
    while (performance.now() < deadline && await degraded() !== value) { await poke(); await new Promise((resolve) => setTimeout(resolve, 20)) }
    return degraded()
  }
  const both = async (): Promise<void> => { await Promise.all(apps.map(async (app) => app.inject('/'))) }
  t.equal(await until(0, both), 0, 'both healthy')
  servers[0]?.pause()
  servers[1]?.pause()
  t.equal(await until(1, both), 1, 'both frozen')
  servers[0]?.resume()
  await until(0, both) // must not reach 0: the second is still frozen
  t.equal(await degraded(), 1, 'one back, the other still frozen: degraded')
  servers[1]?.resume()
  t.equal(await until(0, both), 0, 'both back')
})

t.test("the settle edge's health: degraded shows, live replicas has no sample (only the Redis store's count)", async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const client = new Redis({ port: server.port, enableOfflineQueue: false, retryStrategy: () => 20 })
  client.on('error', () => {})
  const registry = new Registry()
  const metrics = tollgateMetrics({ registry })
  const app = Fastify()
  await app.register(tollgate, {
    store: redisStore({ client, prefix: 'settle-gauges:', heartbeatIntervalMs: 0, breakerThreshold: 1, probeIntervalMs: 60_000 }),
    edge: { capacity: 10, refillPerSecond: 1, mode: 'settle', settleIntervalMs: 60_000 }
  })
  app.get('/', async () => 'ok')
  t.teardown(async () => { metrics.close(); await app.close(); client.disconnect() })
  t.equal((await app.inject('/')).statusCode, 200)
  await server.kill()
  await app.tollgate.settle() // fails: the edge goes on its own share and publishes its health ('settle')
  const { samples } = parseExposition(await registry.metrics())
  const of = (name: string, store: string): number | undefined =>
    samples.find((s) => s.name === name && s.labels.store === store && s.labels.prefix === 'settle-gauges:')?.value
  t.equal(of('tollgate_store_degraded', 'settle'), 1, 'the settle edge is degraded')
  t.equal(of('tollgate_live_replicas', 'settle'), undefined, 'no live replicas sample for the settle edge')
  t.equal(of('tollgate_live_replicas', 'redis'), 1, 'the Redis store behind it shows its count')
})
