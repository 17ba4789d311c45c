/** Decisions and store health on node:diagnostics_channel (lib/diagnostics.ts). */
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify, { type FastifyRequest } from 'fastify'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import tollgate, { DECISION_CHANNEL, NEAR_LIMIT_LEFT, STORE_CHANNEL, redisStore, type DecisionMessage, type Store, type StoreMessage } from '../../lib/index.js'
import { buildApp } from '../helpers.js'
import { requireRedis, startRedis, type RedisServer } from '../redis-server.js'

/** The messages published on `name` for the rest of test `t`. */
function listen<M> (t: Test, name: string): M[] {
  const messages: M[] = []
  const onMessage = (message: unknown): void => { messages.push(message as M) }
  subscribe(name, onMessage)
  t.teardown(() => { unsubscribe(name, onMessage) })
  return messages
}

const outcomes = (messages: DecisionMessage[], layer: string): string[] => messages.filter((m) => m.layer === layer).map((m) => m.outcome)

t.test('every decision of a run arrives, with the documented fields', async (t) => {
  const { app } = await buildApp({
    edge: { capacity: 10, refillPerSecond: 1 },
    app: { tiers: { default: { capacity: 5, refillPerSecond: 1 }, vip: { capacity: 50, refillPerSecond: 10 } } }
  })
  const requests: FastifyRequest[] = []
  app.addHook('onResponse', async (request) => { requests.push(request) })
  app.get('/items/:id', async () => 'ok')
  await app.ready()
  const token = app.jwt.sign({ sub: '42' })
  const messages = listen<DecisionMessage>(t, DECISION_CHANNEL)
  const codes: number[] = []
  for (let i = 0; i < 6; i++) codes.push((await app.inject({ url: `/items/${i}`, headers: { authorization: `Bearer ${token}` } })).statusCode)
  t.same(codes, [200, 200, 200, 200, 200, 429])
  t.equal(messages.length, 12, 'one message per layer and request')
  t.same(outcomes(messages, 'edge'), ['allowed', 'allowed', 'allowed', 'allowed', 'allowed', 'allowed'], 'the edge holds 4 of 10 or more: never near')
  // 5 tokens: after the 4th request 1 is left (≤ 20% of 5), after the 5th none.
  t.same(outcomes(messages, 'app'), ['allowed', 'allowed', 'allowed', 'near-limit', 'near-limit', 'refused'])
  const app6 = messages[11] as DecisionMessage
  t.match(app6, {
    layer: 'app',
    outcome: 'refused',
    allowed: false,
    tier: 'default',
    route: 'GET /items/:id',
    shadow: false,
    cost: 1,
    retryAfterMs: 1000,
    buckets: [{ name: 'app', key: '{user:42}:app', capacity: 5, refillPerSecond: 1, tokens: 0 }]
  })
  t.equal(app6.request, requests[5], 'the request decided')
  t.equal(app6.degraded, undefined, 'not degraded: the store used its state')
  t.equal(typeof app6.storeMs, 'number')
  t.ok(app6.storeMs >= 0 && app6.storeMs < 1000, `storeMs ${app6.storeMs}`)
  t.match(messages[0], { layer: 'edge', outcome: 'allowed', allowed: true, route: 'GET /items/0'.replace('0', ':id'), buckets: [{ name: 'edge', key: '{ip:127.0.0.1}:edge', tokens: 9 }] })
  t.equal(messages[0]?.tier, undefined, 'the edge has no tier')
  t.equal(NEAR_LIMIT_LEFT, 0.2)
  await app.close()
})

t.test('shadow mode: a would-be refusal is published as would-refuse, and passes', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 2, refillPerSecond: 1 }, shadow: true })
  app.get('/', async () => 'ok')
  const messages = listen<DecisionMessage>(t, DECISION_CHANNEL)
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.same(codes, [200, 200, 200])
  t.same(messages.map((m) => m.outcome), ['allowed', 'near-limit', 'would-refuse'])
  t.match(messages[2], { allowed: false, shadow: true, retryAfterMs: 1000 })
  await app.close()
})

t.test('a HEAD request counts under the GET route that answers it', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 5, refillPerSecond: 1 } })
  app.get('/items/:id', async () => 'ok')
  const messages = listen<DecisionMessage>(t, DECISION_CHANNEL)
  t.equal((await app.inject({ method: 'HEAD', url: '/items/7' })).statusCode, 200)
  t.equal(messages[0]?.route, 'GET /items/:id')
  await app.close()
})

t.test('a request no route matched is published with no route', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 5, refillPerSecond: 1 } })
  const messages = listen<DecisionMessage>(t, DECISION_CHANNEL)
  t.equal((await app.inject('/nowhere')).statusCode, 404)
  t.equal(messages.length, 1)
  t.equal(messages[0]?.route, undefined)
  t.equal(messages[0]?.outcome, 'allowed')
  await app.close()
})

t.test('a penalty is in the message, as onLimit gets it', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 1, penalty: { after: 2, withinSeconds: 60, seconds: 30 } } })
  app.get('/', async () => 'ok')
  const messages = listen<DecisionMessage>(t, DECISION_CHANNEL)
  for (let i = 0; i < 4; i++) await app.inject('/')
  t.same(messages.map((m) => m.outcome), ['near-limit', 'refused', 'refused', 'refused'])
  t.same(messages.map((m) => m.penalty?.state), [undefined, undefined, 'started', 'in force'])
  await app.close()
})

t.test('a store that fails: the 503 is published as unavailable', async (t) => {
  const failing: Store = {
    consume () { throw new Error('disk on fire') },
    close () {}
  }
  const app = Fastify()
  await app.register(tollgate, { store: failing, edge: { capacity: 5, refillPerSecond: 1 } })
  app.get('/', async () => 'ok')
  const messages = listen<DecisionMessage>(t, DECISION_CHANNEL)
  t.equal((await app.inject('/')).statusCode, 503)
  t.match(messages, [{ layer: 'edge', outcome: 'unavailable', allowed: false, route: 'GET /', cost: 1, buckets: [] }])
  await app.close()
})

t.test('a store that rejects, on the app layer: unavailable with the tier', async (t) => {
  const failing: Store = {
    consume: async () => { throw new Error('gone') },
    close () {}
  }
  const app = Fastify()
  await app.register(tollgate, { store: failing, app: { tiers: { default: { capacity: 5, refillPerSecond: 1 } } } })
  app.get('/', async () => 'ok')
  const messages = listen<DecisionMessage>(t, DECISION_CHANNEL)
  t.equal((await app.inject('/')).statusCode, 503)
  t.match(messages, [{ layer: 'app', outcome: 'unavailable', tier: 'default' }])
  await app.close()
})

t.test('nothing is published to a subscriber that left', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 5, refillPerSecond: 1 } })
  app.get('/', async () => 'ok')
  const messages: unknown[] = []
  const onMessage = (message: unknown): void => { messages.push(message) }
  subscribe(DECISION_CHANNEL, onMessage)
  await app.inject('/')
  unsubscribe(DECISION_CHANNEL, onMessage)
  await app.inject('/')
  t.equal(messages.length, 1)
  await app.close()
})

/** A client of `server` that reconnects every 50 ms and logs nothing; when `t` ends, the server is thawed and the client disconnected. */
function clientOf (t: Test, server: RedisServer): Redis {
  const client = new Redis({ port: server.port, retryStrategy: () => 50 })
  client.on('error', () => {})
  t.teardown(() => { server.resume(); client.disconnect() })
  return client
}

/** Waits (up to 5 s) until `messages` holds one that `match` accepts; returns it. */
async function eventually<M> (messages: M[], match: (message: M) => boolean, poke: () => Promise<unknown> = async () => {}): Promise<M | undefined> {
  const deadline = performance.now() + 5000
  while (performance.now() < deadline) {
    const found = messages.find(match)
    if (found !== undefined) return found
    await poke()
    await sleep(20)
  }
  return undefined
}

t.test('Redis: replicas counted, breaker opened and closed, degraded decisions', async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const health = listen<StoreMessage>(t, STORE_CHANNEL)
  const decisions = listen<DecisionMessage>(t, DECISION_CHANNEL)
  const client = clientOf(t, server)
  const store = redisStore({ client, prefix: 'diag:', failMode: 'local', timeoutMs: 50, probeIntervalMs: 100, heartbeatIntervalMs: 100, breakerThreshold: 1 })
  const app = Fastify()
  await app.register(tollgate, { store, edge: { capacity: 100, refillPerSecond: 1 } })
  app.get('/', async () => 'ok')
  await app.ready()
  t.teardown(async () => { server.resume(); await app.close() })
  t.match(await eventually(health, (m) => m.event === 'replicas'), { store: 'redis', prefix: 'diag:', event: 'replicas', liveReplicas: 1 }, 'a heartbeat counted the replicas')
  t.equal((await app.inject('/')).statusCode, 200)
  t.equal(decisions.at(-1)?.degraded, undefined, 'decided on Redis')

  server.pause()
  t.equal((await app.inject('/')).statusCode, 200, 'served from the local share')
  t.equal(decisions.at(-1)?.degraded, 'local')
  t.ok((decisions.at(-1) as DecisionMessage).storeMs >= 40, `waited out the timeout: ${(decisions.at(-1) as DecisionMessage).storeMs.toFixed(1)} ms`)
  t.match(await eventually(health, (m) => m.event === 'degraded'), { store: 'redis', prefix: 'diag:', event: 'degraded' })
  t.equal(health.filter((m) => m.event === 'degraded').length, 1, 'one message for the opening, not one per failed call')

  server.resume()
  t.match(await eventually(health, (m) => m.event === 'restored', () => app.inject('/')), { store: 'redis', event: 'restored' })
  t.ok(health.findIndex((m) => m.event === 'restored') > health.findIndex((m) => m.event === 'degraded'), 'restored after degraded')
})

t.test('Redis: nothing is published for a store after it closed, though a call in flight fails later', async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const health = listen<StoreMessage>(t, STORE_CHANNEL)
  const client = clientOf(t, server)
  const store = redisStore({ client, prefix: 'late:', timeoutMs: 50, heartbeatIntervalMs: 0, breakerThreshold: 1 })
  const app = Fastify()
  await app.register(tollgate, { store, edge: { capacity: 100, refillPerSecond: 1 } })
  app.get('/', async () => 'ok')
  await app.ready()
  server.pause()
  const inFlight = app.inject('/')
  await sleep(5) // the request is waiting for Redis
  await app.close()
  t.equal((await inFlight).statusCode, 200, 'decided by failMode')
  await sleep(100)
  const ours = health.filter((m) => m.instance === store)
  t.same(ours.map((m) => m.event), ['closed'], 'closed, and nothing after')
})

t.test('settle edge: nothing is published after close, though a settlement is given up on later', async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const health = listen<StoreMessage>(t, STORE_CHANNEL)
  const client = clientOf(t, server)
  const app = Fastify()
  await app.register(tollgate, {
    store: redisStore({ client, prefix: 'late-settle:', timeoutMs: 2000, heartbeatIntervalMs: 0 }),
    edge: { capacity: 30, refillPerSecond: 10, mode: 'settle', settleIntervalMs: 20 }
  })
  app.get('/', async () => 'ok')
  await app.ready()
  await app.inject('/')
  await app.tollgate.settle()
  server.pause()
  await app.inject('/')
  await app.close() // waits at most the interval: its settlement is still out
  await sleep(1200) // past the settlement's deadline, max(1 s, 10 × 20 ms)
  const settles = health.filter((m) => m.store === 'settle')
  t.equal(settles.at(-1)?.event, 'closed', `the last of the settle edge's messages is 'closed': ${settles.map((m) => m.event).join(', ')}`)
})
