import t from 'tap'
import Fastify from 'fastify'
import tollgate, { memoryStore, redisStore, type Store } from '../../lib/index.js'
import { checkAllowList } from '../../lib/config/allow-list.js'
import { allowTest, MATCH_ERROR_LOG_INTERVAL_MS } from '../../lib/layers/allow-list.js'
import { logSink, readyWith } from '../helpers.js'
import { requireRedis, startRedis } from '../redis-server.js'

const layers = { edge: { capacity: 1, refillPerSecond: 0 }, app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } } } }

t.test('addresses and CIDR ranges, IPv4 and IPv6: an allowed client touches no bucket and gets no header', async (t) => {
  const taken: string[] = []
  const memory = memoryStore()
  const store: Store = { consume: (buckets) => { taken.push(...buckets.map((b) => b.key)); return memory.consume(buckets) }, close: () => { memory.close() } }
  const app = Fastify()
  await app.register(tollgate, { store, ...layers, allowList: ['203.0.113.7', '10.0.0.0/8', '2001:db8::/32', '::1'] })
  app.get('/', async () => 'ok')
  const from = (ip: string) => app.inject({ url: '/', remoteAddress: ip })
  for (const ip of ['203.0.113.7', '10.1.2.3', '::ffff:10.9.9.9', '2001:db8:1:2::5', '::1']) {
    const codes = [(await from(ip)).statusCode, (await from(ip)).statusCode, (await from(ip)).statusCode]
    t.same(codes, [200, 200, 200], `${ip} is never limited`)
    t.equal((await from(ip)).headers['ratelimit'], undefined, `${ip} gets no header`)
  }
  t.same(taken, [], 'no bucket was touched')
  t.same([(await from('203.0.113.8')).statusCode, (await from('203.0.113.8')).statusCode], [200, 429], 'a neighbour is limited')
  t.same([(await from('2001:db9::1')).statusCode, (await from('2001:db9::1')).statusCode], [200, 429], 'outside the IPv6 range')
  await app.close()
})

t.test('a NAT64 client (64:ff9b::/96) of a global IPv4 address matches the IPv4 rules of that address, and IPv6 rules as before', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { ...layers, allowList: ['8.8.8.8', '11.0.0.0/8', '64:ff9b::c633:6400/120'] })
  app.get('/', async () => 'ok')
  const from = (ip: string) => app.inject({ url: '/', remoteAddress: ip })
  for (const ip of ['64:ff9b::8.8.8.8', '64:ff9b::808:808', '64:ff9b::11.1.2.3', '64:ff9b::198.51.100.9', '::ffff:8.8.8.8:40001', '64:ff9b::8.8.8.8:40001']) {
    t.same([(await from(ip)).statusCode, (await from(ip)).statusCode, (await from(ip)).statusCode], [200, 200, 200], `${ip} is never limited`)
  }
  t.same([(await from('64:ff9b::8.8.8.9')).statusCode, (await from('64:ff9b::8.8.8.9')).statusCode], [200, 429], 'a neighbour is limited')
  t.same([(await from('64:ff9b:1::808:808')).statusCode, (await from('64:ff9b:1::808:808')).statusCode], [200, 429], 'outside 64:ff9b::/96 no IPv4 rule applies')
  t.same([(await from('not-an-ip')).statusCode, (await from('not-an-ip')).statusCode], [200, 429], 'what is not an address matches no rule')
  await app.close()
})

t.test('a NAT64 client of a non-global IPv4 address (spoofed or misrouted: RFC 6052 §3.1) matches no IPv4 rule, and is keyed as IPv6', async (t) => {
  const taken: string[] = []
  const memory = memoryStore()
  const store: Store = { consume: (buckets) => { taken.push(...buckets.map((b) => b.key)); return memory.consume(buckets) }, close: () => { memory.close() } }
  const app = Fastify()
  await app.register(tollgate, { store, ...layers, edge: { ...layers.edge, ipv6Subnet: 128 }, allowList: ['127.0.0.1', '10.0.0.0/8', '192.168.0.0/16', '203.0.113.7'] })
  app.get('/', async () => 'ok')
  const from = (ip: string) => app.inject({ url: '/', remoteAddress: ip })
  for (const ip of ['64:ff9b::7f00:1', '64:ff9b::a00:5', '64:ff9b::192.168.1.1', '64:ff9b::203.0.113.7:40001']) {
    t.same([(await from(ip)).statusCode, (await from(ip)).statusCode], [200, 429], `${ip} is limited`)
  }
  t.same(taken.filter((key) => key.endsWith(':edge')), [
    '{ip:64:ff9b:0:0:0:0:7f00:1}:edge', '{ip:64:ff9b:0:0:0:0:a00:5}:edge', '{ip:64:ff9b:0:0:0:0:c0a8:101}:edge', '{ip:64:ff9b:0:0:0:0:cb00:7107}:edge'
  ].flatMap((key) => [key, key]), 'each keyed by its IPv6 address')
  t.same([(await from('127.0.0.1')).statusCode, (await from('127.0.0.1')).statusCode], [200, 200], 'the loopback rule still allows loopback')
  await app.close()
})

t.test('a predicate, alone or with addresses; one that throws does not allow and is logged once a minute', async (t) => {
  const { lines, logger } = logSink()
  const app = Fastify({ logger })
  const allowList = {
    addresses: ['192.0.2.1'],
    match: (request: { headers: Record<string, unknown> }) => {
      if (request.headers['x-boom'] !== undefined) throw new Error('boom')
      return request.headers['x-monitor'] === 'yes'
    }
  }
  await app.register(tollgate, { ...layers, allowList, warnings: false })
  app.get('/', async () => 'ok')
  const monitor = await Promise.all([1, 2, 3].map(async () => (await app.inject({ url: '/', headers: { 'x-monitor': 'yes' } })).statusCode))
  t.same(monitor, [200, 200, 200], 'the predicate allows')
  t.same([(await app.inject({ url: '/', remoteAddress: '192.0.2.1' })).statusCode, (await app.inject({ url: '/', remoteAddress: '192.0.2.1' })).statusCode], [200, 200], 'the address allows')
  const boom = []
  for (let i = 0; i < 3; i++) boom.push((await app.inject({ url: '/', remoteAddress: '198.51.100.9', headers: { 'x-boom': '1' } })).statusCode)
  t.same(boom, [200, 429, 429], 'a throw does not allow')
  t.equal(lines.filter((line) => line.msg.includes('allowList.match threw')).length, 1, 'one line for three throws')
  await app.close()
  t.equal(MATCH_ERROR_LOG_INTERVAL_MS, 60_000)
})

t.test('addresses alone, as { addresses }', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { ...layers, allowList: { addresses: ['192.0.2.0/24'] } })
  app.get('/', async () => 'ok')
  const from = (ip: string) => app.inject({ url: '/', remoteAddress: ip })
  t.same([(await from('192.0.2.9')).statusCode, (await from('192.0.2.9')).statusCode], [200, 200])
  t.same([(await from('198.51.100.9')).statusCode, (await from('198.51.100.9')).statusCode], [200, 429])
  await app.close()
})

t.test('a predicate alone, as a function or as { match }', async (t) => {
  for (const allowList of [(request: { headers: Record<string, unknown> }) => request.headers['x-monitor'] === 'yes', { match: (request: { headers: Record<string, unknown> }) => request.headers['x-monitor'] === 'yes' }]) {
    const app = Fastify()
    await app.register(tollgate, { ...layers, allowList: allowList as never })
    app.get('/', async () => 'ok')
    const monitor = { url: '/', headers: { 'x-monitor': 'yes' } }
    t.same([(await app.inject(monitor)).statusCode, (await app.inject(monitor)).statusCode], [200, 200], typeof allowList)
    t.same([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 429], 'others are limited')
    await app.close()
  }
})

t.test('the throw log line comes again after the interval, with the count of throws in between', async (t) => {
  const logged: Array<Record<string, unknown>> = []
  const log = { error: (object: Record<string, unknown>) => { logged.push(object) } }
  let now = 0
  const test = allowTest({ addresses: undefined, match: () => { throw new Error('boom') } }, { perConnection: false, log: log as never, now: () => now, lookups: undefined as never })
  const request = {} as never
  t.equal(test(request), false)
  now = 30_000
  t.equal(test(request), false)
  t.equal(test(request), false)
  t.equal(logged.length, 1)
  now = 60_000
  t.equal(test(request), false)
  t.equal(logged.length, 2)
  t.equal(logged[1]?.since, 2, 'two throws were not logged in between')
})

t.test('trustProxy: the address Fastify resolves is the one checked', async (t) => {
  const app = Fastify({ trustProxy: '10.0.0.0/8' })
  await app.register(tollgate, { edge: layers.edge, allowList: ['203.0.113.0/24'] })
  app.get('/', async () => 'ok')
  const from = (client: string) => app.inject({ url: '/', remoteAddress: '10.0.0.2', headers: { 'x-forwarded-for': client } })
  t.same([(await from('203.0.113.5')).statusCode, (await from('203.0.113.5')).statusCode], [200, 200])
  t.same([(await from('198.51.100.5')).statusCode, (await from('198.51.100.5')).statusCode], [200, 429], 'the proxy itself is not on the list')
  await app.close()
})

t.test('malformed allow-lists fail at startup, naming the entry', async (t) => {
  const cases: Array<[unknown, RegExp]> = [
    [['10.0.0.0/33'], /Expected `allowList\[0\]` to be an IP address or a CIDR range .*got `"10\.0\.0\.0\/33"` \(string\)/],
    [['10.0.0.1', 'example.com'], /`allowList\[1\]`.*got `"example\.com"`/],
    [{ addresses: ['2001:db8::/129'] }, /`allowList\.addresses\[0\]`/],
    [{ addresses: [42] }, /`allowList\.addresses\[0\]`.*got `42` \(number\)/],
    [['10.0.0.0/x'], /`allowList\[0\]`/],
    [{ addresses: '10.0.0.0/8' }, /Expected `allowList\.addresses` to be an array/],
    [{ match: 'yes' }, /Expected `allowList\.match` to be a function/],
    [{ only: [] }, /Unknown option `allowList\.only`/],
    ['10.0.0.1', /Expected `allowList` to be an array of IP addresses and CIDR ranges, a function of the request, or \{ addresses, match \}/]
  ]
  for (const [allowList, message] of cases) {
    await t.rejects(readyWith({ ...layers, allowList }), { code: 'TOLLGATE_INVALID_OPTION', message }, JSON.stringify(allowList))
  }
  t.same(checkAllowList(undefined), undefined)
})

if (requireRedis(t)) {
  t.test('redis: an allowed client costs Redis nothing', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const app = Fastify()
    await app.register(tollgate, { store: redisStore({ client, heartbeatIntervalMs: 0 }), ...layers, allowList: ['127.0.0.1'] })
    app.get('/', async () => 'ok')
    for (let i = 0; i < 5; i++) t.equal((await app.inject('/')).statusCode, 200)
    t.same(await client.keys('*'), [], 'no key was written')
    await app.close()
  })
}
