import t, { type Test } from 'tap'
import { Writable } from 'node:stream'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import tollgate, { redisStore, type FailMode, type RedisStore } from '../../../lib/index.js'
import { answerBound, commandCalls, freePort, PATIENT_TIMEOUT_MS, requireRedis, startRedis, type RedisServer } from '../../redis-server.js'
import { eventLoopLag } from '../../helpers.js'
import { TcpProxy } from '../../faults/proxy.js'

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** The store's `timeoutMs` in these tests: a Redis that stays silent for 50 ms is given up on. */
const TIMEOUT_MS = 50

interface Sample { status: number, ms: number, headers: Record<string, unknown>, phase: 'before' | 'outage' | 'after' }

/** A Fastify app on a Redis store, logging into `lines`. */
async function appOn (t: Test, server: RedisServer, failMode: FailMode, clientOptions: { enableOfflineQueue?: boolean, maxRetriesPerRequest?: number } = {}, edge = { capacity: 10_000, refillPerSecond: 0 }) {
  const client = new Redis({ port: server.port, retryStrategy: () => 50, ...clientOptions })
  client.on('error', () => {})
  const lines: Array<{ level: number, msg: string }> = []
  const stream = new Writable({ write (chunk, _encoding, callback) { lines.push(JSON.parse(String(chunk))); callback() } })
  const store = redisStore({ client, failMode, timeoutMs: TIMEOUT_MS, probeIntervalMs: 200, heartbeatIntervalMs: 100 })
  const app = Fastify({ logger: { level: 'info', stream } })
  await app.register(tollgate, { store, edge })
  app.get('/', async () => 'ok')
  await app.ready()
  if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve))
  t.teardown(async () => { await app.close(); client.disconnect() })
  return { app, store, client, lines }
}

/** Requests in waves of 10 while Redis is killed and restarted; returns every answer with its latency. */
async function throughOutage (app: FastifyInstance, server: RedisServer, store: RedisStore): Promise<{ samples: Sample[], lagMs: number }> {
  const samples: Sample[] = []
  const lag = eventLoopLag()
  let phase: Sample['phase'] = 'before'
  const wave = async (): Promise<void> => {
    await Promise.all(Array.from({ length: 10 }, async () => {
      const started = performance.now()
      const response = await app.inject('/')
      samples.push({ status: response.statusCode, ms: performance.now() - started, headers: response.headers, phase })
    }))
  }
  // Each phase lasts its time and at least its waves: a busy machine sends fewer waves in 600 ms.
  for (let end = performance.now() + 200, waves = 0; performance.now() < end || waves < 2; waves++) await wave()
  phase = 'outage'
  await server.kill()
  for (let end = performance.now() + 600, waves = 0; performance.now() < end || waves < 5; waves++) await wave()
  await server.start()
  phase = 'after'
  const deadline = performance.now() + 5000
  while (store.state !== 'closed' && performance.now() < deadline) await wave()
  await wave()
  return { samples, lagMs: lag.stop() }
}

if (requireRedis(t)) {
  for (const failMode of ['open', 'closed', 'local'] as const) {
    t.test(`kill Redis under load, failMode '${failMode}': no 500s, bounded latency, and Redis used again`, async (t) => {
      const server = await startRedis(t)
      // A quota no run spends, however fast the machine: with 10 000, a fast run's 'local' share ran out (429s).
      const { app, store, client, lines } = await appOn(t, server, failMode, { enableOfflineQueue: false, maxRetriesPerRequest: 0 }, { capacity: 1_000_000, refillPerSecond: 0 })
      const { samples, lagMs } = await throughOutage(app, server, store)
      const outage = samples.filter((sample) => sample.phase === 'outage')
      const slowest = Math.max(...samples.map((sample) => sample.ms))
      t.ok(outage.length >= 50, `${outage.length} requests during the outage`)
      t.same(samples.filter((sample) => sample.status >= 500 && sample.status !== 503), [], 'no 500s')
      t.ok(slowest < answerBound(TIMEOUT_MS, lagMs), `slowest answer ${slowest.toFixed(1)} ms (timeout ${TIMEOUT_MS} ms, bound ${answerBound(TIMEOUT_MS, lagMs).toFixed(0)} ms with the loop ${lagMs.toFixed(0)} ms late)`)
      t.ok(samples.filter((s) => s.phase === 'before').every((s) => s.status === 200 && s.headers['ratelimit'] !== undefined), 'before: allowed by Redis')
      if (failMode === 'open') {
        t.ok(outage.every((s) => s.status === 200), 'open: allowed')
        const uncounted = outage.filter((s) => s.headers['ratelimit'] === undefined)
        t.ok(uncounted.length > 0, 'open: uncounted answers carry no RateLimit (the state is unknown)')
        t.ok(uncounted.every((s) => s.headers['ratelimit-policy'] === '"edge";q=1000000'), 'open: they carry the policy, still true')
      } else if (failMode === 'closed') {
        t.ok(outage.some((s) => s.status === 503), 'closed: refused with 503')
        t.ok(outage.every((s) => s.status === 200 || (s.status === 503 && s.headers['retry-after'] === '1')), 'closed: 503s carry Retry-After')
      } else {
        t.ok(outage.every((s) => s.status === 200), 'local: allowed within the local share')
        t.ok(outage.some((s) => s.headers['ratelimit-policy'] === '"edge";q=1000000'), 'local: headers show the local policy')
      }
      t.equal(store.state, 'closed', 'the breaker closed again')
      t.equal(await client.exists('tollgate:{ip:127.0.0.1}:edge'), 1, 'after the restart, buckets are written to Redis again')
      const storeLines = lines.filter((line) => line.msg.includes('Redis'))
      t.ok(storeLines.length <= 6, `${storeLines.length} store log lines for ${outage.length} requests during the outage`)
      t.ok(lines.some((line) => line.msg.includes('Redis answers again')), 'recovery is logged')
      t.equal(lines.filter((line) => line.msg.includes('the store failed')).length, 0, 'no error line per request')
    })
  }

  t.test("failMode 'open' with Redis stopped: every header style sends the policies alone", async (t) => {
    const server = await startRedis(t)
    const layers = { edge: { capacity: 100, refillPerSecond: 50 }, app: { tiers: { default: { capacity: 20, refillPerSecond: 5 } } } }
    const styles = { draft: ['ratelimit-policy', 'ratelimit'], 'draft-03': ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset'], legacy: ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'] } as const
    const apps = []
    for (const headers of Object.keys(styles) as Array<keyof typeof styles>) {
      const client = new Redis({ port: server.port, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 50 })
      client.on('error', () => {})
      const app = Fastify()
      await app.register(tollgate, { store: redisStore({ client, failMode: 'open', timeoutMs: PATIENT_TIMEOUT_MS, heartbeatIntervalMs: 0, prefix: `${headers}:` }), headers, ...layers })
      app.get('/', async () => 'ok')
      await app.ready()
      if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve))
      t.teardown(async () => { await app.close(); client.disconnect() })
      apps.push({ headers, app, names: styles[headers] })
    }
    const shown = async (app: FastifyInstance, names: readonly string[]): Promise<unknown[]> => {
      const response = await app.inject('/')
      t.equal(response.statusCode, 200)
      return names.map((name) => response.headers[name])
    }
    const counted = { draft: ['"edge";q=100;w=2, "app";q=20;w=4', '"edge";r=99;t=1, "app";r=19;t=1'], 'draft-03': ['20', '19', '1'], legacy: ['20', '19', '1'] }
    for (const { headers, app, names } of apps) t.same(await shown(app, names), counted[headers], `${headers}: counted by Redis`)
    await server.kill()
    const uncounted = { draft: ['"edge";q=100;w=2, "app";q=20;w=4', undefined], 'draft-03': ['20', undefined, undefined], legacy: ['20', undefined, undefined] }
    for (const { headers, app, names } of apps) t.same(await shown(app, names), uncounted[headers], `${headers}: uncounted, the policies alone`)
  })

  t.test('with ioredis defaults (offline queue on), the timeout still bounds every answer', async (t) => {
    const server = await startRedis(t)
    const { app, store } = await appOn(t, server, 'local')
    const { samples, lagMs } = await throughOutage(app, server, store)
    const slowest = Math.max(...samples.map((sample) => sample.ms))
    t.ok(slowest < answerBound(TIMEOUT_MS, lagMs), `slowest answer ${slowest.toFixed(1)} ms (bound ${answerBound(TIMEOUT_MS, lagMs).toFixed(0)} ms with the loop ${lagMs.toFixed(0)} ms late)`)
    t.same(samples.filter((sample) => sample.status !== 200), [], 'all allowed within the local share')
    t.equal(store.state, 'closed')
  })

  t.test("failMode 'local' gives each replica (1 + headroom) / live replicas of the quota, from the heartbeat", async (t) => {
    const server = await startRedis(t)
    const apps = []
    for (let i = 0; i < 3; i++) apps.push(await appOn(t, server, 'local', { enableOfflineQueue: false }, { capacity: 30, refillPerSecond: 0 }))
    const deadline = performance.now() + 3000
    while (apps.some(({ store }) => store.liveReplicas !== 3) && performance.now() < deadline) await sleep(20)
    t.same(apps.map(({ store }) => store.liveReplicas), [3, 3, 3], 'each replica sees three live replicas')
    await server.kill()
    const admitted: number[] = []
    for (const { app } of apps) {
      let count = 0
      for (let i = 0; i < 20; i++) if ((await app.inject('/')).statusCode === 200) count++
      admitted.push(count)
    }
    t.same(admitted, [12, 12, 12], '30 × 1.2 / 3 = 12 each; 36 in all instead of 90')
  })

  t.test('a reply the store cannot read (a corrupting middlebox) fails the call: decided by failMode, logged', async (t) => {
    const server = await startRedis(t)
    const proxy = new TcpProxy(server.port)
    const port = await proxy.listen()
    const client = new Redis({ port, maxRetriesPerRequest: 0 })
    const lines: Array<{ level: number, msg: string }> = []
    const stream = new Writable({ write (chunk, _encoding, callback) { lines.push(JSON.parse(String(chunk))); callback() } })
    const app = Fastify({ logger: { level: 'info', stream } })
    await app.register(tollgate, { store: redisStore({ client, failMode: 'closed', timeoutMs: PATIENT_TIMEOUT_MS, heartbeatIntervalMs: 0 }), edge: { capacity: 100, refillPerSecond: 0 } })
    app.get('/', async () => 'ok')
    t.teardown(async () => { await app.close(); client.disconnect(); await proxy.close() })
    t.equal((await app.inject('/')).statusCode, 200, 'read as sent')
    // An allowed one-bucket decision ('1 0 <tokens>') comes back with tokens that are no number.
    const allowed = /^\$\d+\r\n1 0 \d+\r\n$/
    proxy.rewrite = (chunk) => allowed.test(chunk.toString('latin1')) ? Buffer.from('$5\r\n1 0 x\r\n', 'latin1') : chunk
    const corrupted = await app.inject('/')
    t.equal(corrupted.statusCode, 503, "failMode 'closed': refused, as when Redis does not answer")
    t.equal(corrupted.headers['retry-after'], '1')
    t.ok(lines.some((line) => /unexpected reply from the Redis script/.test(JSON.stringify(line))), 'the reply it could not read is logged')
    proxy.rewrite = undefined
    t.equal((await app.inject('/')).statusCode, 200, 'the next reply read decides again')
    t.equal(await client.get('tollgate:{ip:127.0.0.1}:edge') !== null, true, 'Redis took the decisions')
  })

  t.test('Redis down at startup: ready() waits connectWaitMs, then the app serves by failMode', async (t) => {
    const port = await freePort()
    const client = new Redis({ port, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 100 })
    client.on('error', () => {})
    t.teardown(() => { client.disconnect() })
    const lines: string[] = []
    const stream = new Writable({ write (chunk, _encoding, callback) { lines.push(String(chunk)); callback() } })
    const app = Fastify({ logger: { level: 'warn', stream } })
    await app.register(tollgate, { store: redisStore({ client, connectWaitMs: 200, heartbeatIntervalMs: 100 }), edge: { capacity: 5, refillPerSecond: 0 } })
    app.get('/', async () => 'ok')
    const started = performance.now()
    await app.ready()
    const waited = performance.now() - started
    t.ok(waited >= 190 && waited < 1500, `ready() waited ${waited.toFixed(0)} ms`)
    t.ok(lines.some((line) => line.includes('not connected yet')), 'and said so')
    const response = await app.inject('/')
    t.equal(response.statusCode, 200, 'served from the local share')
    t.equal(response.headers['ratelimit-policy'], '"edge";q=5')
    await app.close()
  })

  t.test('CLIENT PAUSE (a slow Redis): answers stay within the timeout', async (t) => {
    const server = await startRedis(t)
    // A quota no run spends: a quiet machine sends thousands of requests during the pause, past a local share of 10 000.
    const { app, store } = await appOn(t, server, 'local', {}, { capacity: 1_000_000, refillPerSecond: 0 })
    const inspector = server.client(t)
    t.equal((await app.inject('/')).statusCode, 200)
    // Waves of requests for as long as Redis is surely paused (it began after `paused`): a busy machine can take
    // hundreds of ms a wave, and the breaker opens after 3 failed calls (a wave's 10 requests go as one call).
    const PAUSE_MS = 3000
    const paused = performance.now()
    await inspector.client('PAUSE', PAUSE_MS, 'ALL')
    const latencies: number[] = []
    const states: string[] = []
    const lag = eventLoopLag()
    while (performance.now() < paused + PAUSE_MS) {
      await Promise.all(Array.from({ length: 10 }, async () => {
        const started = performance.now()
        t.equal((await app.inject('/')).statusCode, 200)
        latencies.push(performance.now() - started)
      }))
      states.push(store.state)
    }
    const slowest = Math.max(...latencies)
    const bound = answerBound(TIMEOUT_MS, lag.stop())
    t.ok(slowest < bound, `slowest answer during the pause ${slowest.toFixed(1)} ms (bound ${bound.toFixed(0)} ms)`)
    t.ok(states.some((state) => state !== 'closed'), `the breaker opened (after each wave: ${states.join(', ')})`)
    const deadline = performance.now() + 3000
    while (store.state !== 'closed' && performance.now() < deadline) { await app.inject('/'); await sleep(20) }
    t.equal(store.state, 'closed', 'recovered after the pause')
  })

  t.test('a flood of refused requests from one client costs Redis almost nothing (deny cache)', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const inspector = server.client(t)
    const app = Fastify()
    // One token back every 12 minutes: no refill during the test, however slow the machine
    // (at 0.5/s, a burst that spanned the 2 s refill sent its refusals to Redis).
    await app.register(tollgate, { store: redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS }), edge: { capacity: 5, refillPerSecond: 5 / 3600 } })
    app.get('/', async () => 'ok')
    t.equal((await app.inject('/')).statusCode, 200) // loads the script
    const before = await commandCalls(inspector)
    const statuses: number[] = []
    for (let i = 0; i < 1000; i++) statuses.push((await app.inject('/')).statusCode)
    await Promise.all(Array.from({ length: 1000 }, async () => statuses.push((await app.inject('/')).statusCode)))
    const after = await commandCalls(inspector)
    const refused = statuses.filter((status) => status === 429).length
    const delta = (command: string): number => (after[command] ?? 0) - (before[command] ?? 0)
    const scriptCalls = delta('evalsha') + delta('eval')
    // commandstats also counts the commands a script runs inside (TIME, GET, SET).
    const all = Object.keys(after).reduce((sum, command) => sum + delta(command), 0) - 1 // less the INFO itself
    t.ok(refused >= 1995, `${refused} refused`)
    t.ok(scriptCalls / refused <= 0.01, `${scriptCalls} script calls for ${refused} refusals`)
    t.ok(all / refused <= 0.02, `${all} commands in all, those inside the script included`)
    const cached = await app.inject('/')
    t.equal(cached.statusCode, 429)
    t.match(cached.headers['ratelimit'], /^"edge";r=0;t=\d+$/, 'a cached refusal keeps honest headers')
    t.match(cached.headers['retry-after'], /^7[0-2]\d$/, 'about 720 s')
    await app.close()
  })
}
