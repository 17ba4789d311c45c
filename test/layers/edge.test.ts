import t from 'tap'
import { createHash, createHmac } from 'node:crypto'
import Fastify from 'fastify'
import tollgate, { memoryStore, type GlobalEdgeOptions, type LimitDecision } from '../../lib/index.js'
import { buildApp, count, logSink, manualClock, statuses } from '../helpers.js'

const edge = { capacity: 20, refillPerSecond: 5 }

t.test('B = 20, R = 5/s: 20 pass at once, the 21st waits 1 s, a second later 5 more pass', async (t) => {
  const { app, clock } = await buildApp({ edge })
  app.get('/', async () => 'ok')
  t.same(count(await statuses(app, 20), 200), 20)
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '1')
  clock.advance(1000)
  const codes = await statuses(app, 6)
  t.same(codes, [200, 200, 200, 200, 200, 429])
  await app.close()
})

t.test('the edge covers unknown routes (404s) and skips routes with rateLimit: false', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 } })
  app.get('/', async () => 'ok')
  app.get('/health', { config: { rateLimit: false } }, async () => 'ok')
  t.equal((await app.inject('/nope')).statusCode, 404)
  t.equal((await app.inject('/nope')).statusCode, 429, 'a scanner of missing routes is limited too')
  t.same(await statuses(app, 3, { url: '/health' }), [200, 200, 200])
  t.equal((await app.inject('/health')).headers['ratelimit'], undefined, 'an exempt route gets no headers')
  await app.close()
})

t.test('keyed by the client IP: each address has its own bucket', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 } })
  app.get('/', async () => 'ok')
  t.equal((await app.inject({ url: '/', remoteAddress: '198.51.100.1' })).statusCode, 200)
  t.equal((await app.inject({ url: '/', remoteAddress: '198.51.100.1' })).statusCode, 429)
  t.equal((await app.inject({ url: '/', remoteAddress: '198.51.100.2' })).statusCode, 200)
  await app.close()
})

t.test('X-Forwarded-For is ignored without trustProxy', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 } })
  app.get('/', async () => 'ok')
  const codes = []
  for (let i = 0; i < 3; i++) {
    codes.push((await app.inject({ url: '/', remoteAddress: '10.0.0.9', headers: { 'x-forwarded-for': `203.0.113.${i}` } })).statusCode)
  }
  t.same(codes, [200, 429, 429], 'a client cannot pick a fresh IP per request')
  await app.close()
})

t.test('with trustProxy, the address Fastify resolves from X-Forwarded-For is the key', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 } }, { trustProxy: '10.0.0.0/8' })
  app.get('/', async () => 'ok')
  const from = (client: string) => app.inject({ url: '/', remoteAddress: '10.0.0.9', headers: { 'x-forwarded-for': client } })
  t.equal((await from('203.0.113.1')).statusCode, 200)
  t.equal((await from('203.0.113.1')).statusCode, 429)
  t.equal((await from('203.0.113.2')).statusCode, 200, 'another client behind the same proxy')
  await app.close()
})

t.test('a forwarded address with a port (Azure Application Gateway) keys by the address, not the connection', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 } }, { trustProxy: '10.0.0.0/8' })
  app.get('/', async () => 'ok')
  const from = (client: string) => app.inject({ url: '/', remoteAddress: '10.0.0.9', headers: { 'x-forwarded-for': client } })
  t.same([(await from('203.0.113.7:40001')).statusCode, (await from('203.0.113.7:40002')).statusCode], [200, 429], 'one IPv4 bucket, whatever the port')
  t.equal((await from('203.0.113.7')).statusCode, 429, 'and it is the bucket of the bare address')
  t.same([(await from('[2001:db8:1:2::1]:443')).statusCode, (await from('[2001:db8:1:2::9]:444')).statusCode], [200, 429], 'bracketed IPv6 with a port: grouped by /64')
  t.equal((await from('2001:db8:1:2::443')).statusCode, 429, 'a bare IPv6 keeps its last group (no port cut), and is in the same /64')
  await app.close()
})

t.test('IPv6 is grouped by /64 by default, and the prefix is configurable', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 } })
  app.get('/', async () => 'ok')
  t.equal((await app.inject({ url: '/', remoteAddress: '2001:db8:1:2::1' })).statusCode, 200)
  t.equal((await app.inject({ url: '/', remoteAddress: '2001:db8:1:2:ffff::9' })).statusCode, 429, 'same /64')
  t.equal((await app.inject({ url: '/', remoteAddress: '2001:db8:1:3::1' })).statusCode, 200, 'another /64')
  await app.close()

  const wide = await buildApp({ edge: { capacity: 1, refillPerSecond: 0, ipv6Subnet: 48 } })
  wide.app.get('/', async () => 'ok')
  t.equal((await wide.app.inject({ url: '/', remoteAddress: '2001:db8:1:2::1' })).statusCode, 200)
  t.equal((await wide.app.inject({ url: '/', remoteAddress: '2001:db8:1:3::1' })).statusCode, 429, 'same /48')
  await wide.app.close()
})

t.test('IPv4-mapped IPv6 shares the IPv4 bucket', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 } })
  app.get('/', async () => 'ok')
  t.equal((await app.inject({ url: '/', remoteAddress: '192.0.2.7' })).statusCode, 200)
  t.equal((await app.inject({ url: '/', remoteAddress: '::ffff:192.0.2.7' })).statusCode, 429)
  await app.close()
})

t.test('key(request) keys the edge, e.g. by API key; no key falls back to the IP', async (t) => {
  const { app } = await buildApp({
    edge: { capacity: 1, refillPerSecond: 0, key: (request) => request.headers['x-api-key'] }
  })
  app.get('/', async () => 'ok')
  const withKey = (key: string) => app.inject({ url: '/', headers: { 'x-api-key': key } })
  t.equal((await withKey('alpha')).statusCode, 200)
  t.equal((await withKey('alpha')).statusCode, 429)
  t.equal((await withKey('beta')).statusCode, 200, 'each key its own bucket, from the same IP')
  t.equal((await app.inject('/')).statusCode, 200, 'no key: the IP bucket')
  t.equal((await app.inject('/')).statusCode, 429)
  await app.close()
})

t.test('API keys are never stored or logged in clear: the bucket key holds an HMAC with edge.keySecret', async (t) => {
  const apiKey = 'sk_live_4eC39HqLyjWDarjtT1zdp7dc'
  const secret = 'a-secret-of-at-least-16-characters'
  /** The bucket keys `onLimit` saw, and every log line, for one refused request per app. */
  const refuse = async (edge: Partial<GlobalEdgeOptions>, shadow: boolean) => {
    const { lines, logger } = logSink()
    const seen: LimitDecision[] = []
    const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0, key: (request) => request.headers['x-api-key'], ...edge }, shadow, onLimit: (_request, decision) => { seen.push(decision) } }, { logger })
    app.get('/', async () => 'ok')
    const statuses = [(await app.inject({ url: '/', headers: { 'x-api-key': apiKey } })).statusCode, (await app.inject({ url: '/', headers: { 'x-api-key': apiKey } })).statusCode]
    await app.close()
    return { statuses, keys: seen.map((decision) => decision.buckets[0]?.key), log: JSON.stringify(lines) }
  }
  const hmac = createHmac('sha256', secret).update(apiKey).digest('base64url')
  for (const shadow of [false, true]) {
    const keyed = await refuse({ keySecret: secret }, shadow)
    t.same(keyed.statuses, [200, shadow ? 200 : 429], `shadow: ${shadow}`)
    t.same(keyed.keys, [`{key:${hmac}}:edge`], 'onLimit sees the HMAC-SHA256 of the key')
    t.ok(keyed.log.includes(hmac), 'the log shows the digest')
    t.notOk(keyed.log.includes(apiKey), `no log line holds the key (${shadow ? 'info in shadow mode' : 'debug refusal'})`)
  }
  t.same((await refuse({ keySecret: secret }, false)).keys, [`{key:${hmac}}:edge`], 'another registration with the same secret: the same bucket (replicas share it on Redis)')
  t.same((await refuse({ keySecret: 'another-secret-of-16-characters' }, false)).keys.map((key) => key?.includes(hmac)), [false], 'another secret: another digest')
  const plain = await refuse({}, false)
  t.same(plain.keys, [`{key:${createHash('sha256').update(apiKey).digest('base64url')}}:edge`], 'without keySecret: plain SHA-256, still not in clear')
  t.notOk(plain.log.includes(apiKey))
})

t.test('long key values are digested too, and each still has its own bucket', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0, key: (request) => request.headers['x-api-key'], keySecret: 'a-secret-of-at-least-16-characters' } })
  app.get('/', async () => 'ok')
  const send = async (key: string) => (await app.inject({ url: '/', headers: { 'x-api-key': key } })).statusCode
  const long = 'k'.repeat(300)
  t.same([await send(long), await send(long), await send(long + 'x')], [200, 429, 200])
  await app.close()
})

t.test('a key function that throws or returns junk falls back to the IP, never a free pass', async (t) => {
  const results: unknown[] = [new Error('boom'), '', null, { a: 1 }, ['a', 'b'], 42, 42]
  let call = 0
  const { app } = await buildApp({
    edge: {
      capacity: 1,
      refillPerSecond: 0,
      key: () => {
        const result = results[call++]
        if (result instanceof Error) throw result
        return result
      }
    }
  })
  app.get('/', async () => 'ok')
  t.same(await statuses(app, 5), [200, 429, 429, 429, 429], 'throw, empty, null, object and array all use the IP bucket')
  t.same(await statuses(app, 2), [200, 429], 'a finite number is a key')
  await app.close()
})

t.test('300 concurrent requests on one key admit exactly the capacity', async (t) => {
  const clock = manualClock()
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ clock: clock.now }), edge: { capacity: 100, refillPerSecond: 50 } })
  app.get('/', async () => 'ok')
  const responses = await Promise.all(Array.from({ length: 300 }, () => app.inject('/')))
  t.equal(responses.filter((r) => r.statusCode === 200).length, 100)
  t.equal(responses.filter((r) => r.statusCode === 429).length, 200)
  await app.close()
})
