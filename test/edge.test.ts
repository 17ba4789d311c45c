import t from 'tap'
import Fastify from 'fastify'
import tollgate, { memoryStore } from '../lib/index.js'
import { buildApp, count, manualClock, statuses } from './helpers.js'

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
    edge: { capacity: 1, refillPerSecond: 0, key: (request) => request.headers['x-api-key'] as string | undefined }
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

t.test('a key function that throws or returns junk falls back to the IP, never a free pass', async (t) => {
  const results: unknown[] = [new Error('boom'), '', null, { a: 1 }, 42, 42]
  let call = 0
  const { app } = await buildApp({
    edge: {
      capacity: 1,
      refillPerSecond: 0,
      key: () => {
        const result = results[call++]
        if (result instanceof Error) throw result
        return result as string
      }
    }
  })
  app.get('/', async () => 'ok')
  t.same(await statuses(app, 4), [200, 429, 429, 429], 'throw, empty, null and object all use the IP bucket')
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
