/**
 * Hostile keys as Redis sees them: a client chooses its API key, its JWT `sub`
 * and its IPv6 address, and must not be able to grow Redis without bound, forge
 * another identity's key or hash tag, or escape its bucket by rotating.
 */
import t from 'tap'
import { createHash } from 'node:crypto'
import Fastify from 'fastify'
import tollgate, { redisStore, type TollgateOptions } from '../../lib/index.js'
import { requireRedis, startRedis } from '../redis-server.js'

if (requireRedis(t)) {
  t.test('keys chosen by clients stay bounded, and cannot reach another identity\'s bucket', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const inspector = server.client(t)
    const options: TollgateOptions = {
      store: redisStore({ client, heartbeatIntervalMs: 0, denyCacheSize: 0, timeoutMs: 2000 }),
      edge: { capacity: 2, refillPerSecond: 0, key: (request) => request.headers['x-api-key'] },
      app: { tiers: { default: { capacity: 2, refillPerSecond: 0 } }, identify: (request) => ({ id: String(request.headers['x-user'] ?? 'nobody') }) }
    }
    const app = Fastify()
    await app.register(tollgate, options)
    app.get('/', async () => 'ok')
    t.teardown(() => app.close())
    const send = async (apiKey: string, user = 'someone'): Promise<number> =>
      (await app.inject({ url: '/', headers: { 'x-api-key': apiKey, 'x-user': user } })).statusCode

    t.equal(await send('victim', 'victim-user'), 200, 'the victim spends one of two')
    const forged = ['victim}:edge', '{key:victim}', '}{key:victim}', 'victim\n', 'victim}', '{victim', 'victim\r\n:edge', ' victim']
    for (const key of forged) t.equal(await send(key, `{user:victim-user}${key}`), 200, `${JSON.stringify(key)} has a bucket of its own`)
    t.equal(await send('victim', 'victim-user'), 200, 'the victim still has its second token: nothing forged reached it')
    t.equal(await send('victim', 'victim-user'), 429)

    const huge = 'k'.repeat(1_000_000)
    t.same([await send(huge), await send(huge), await send(huge)], [200, 200, 429], 'a 1 MB key is limited like any other')

    const keys = await inspector.keys('tollgate:*')
    t.ok(keys.length > 0)
    t.ok(keys.every((key) => key.length <= 100), `every Redis key is short (longest ${Math.max(...keys.map((k) => k.length))} characters)`)
    t.ok(keys.every((key) => /^tollgate:\{(key|user|ip):[^{}\r\n]+\}:(edge|app)$/.test(key)), 'one hash tag each, at the start, with no braces or line breaks inside')
    const victimKey = `tollgate:{key:${createHash('sha256').update('victim').digest('base64url')}}:edge`
    t.ok(keys.includes(victimKey), 'the victim\'s API key is stored as its digest')
    t.notOk(keys.some((key) => key.includes('victim}')), 'no key holds an API key in clear')
    t.same(keys.filter((key) => key.includes(':victim-user}')), ['tollgate:{user:victim-user}:app'], 'only the victim\'s own buckets carry its user name')
  })

  t.test('a user id with a lone surrogate has a Redis key of its own, apart from its U+FFFD twin', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const ids: Record<string, string> = { attacker: 'alice\uD800', victim: 'alice\uFFFD' }
    const app = Fastify()
    await app.register(tollgate, {
      store: redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: 2000 }),
      app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } }, identify: (request) => ({ id: ids[String(request.headers['x-who'])] as string }) }
    })
    app.get('/', async () => 'ok')
    t.teardown(() => app.close())
    const codes: number[] = []
    for (const who of ['attacker', 'victim']) codes.push((await app.inject({ url: '/', headers: { 'x-who': who } })).statusCode)
    t.same(codes, [200, 200], 'the victim keeps its own token')
    const keys = await server.client(t).keys('tollgate:*')
    t.equal(keys.length, 2)
    t.ok(keys.includes(`tollgate:{user:~${createHash('sha256').update(ids.victim as string).digest('base64url')}}:app`), 'the well-formed id keeps its key')
  })

  t.test('rotating addresses within one IPv6 /64 stays in one bucket', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const app = Fastify()
    await app.register(tollgate, { store: redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: 2000 }), edge: { capacity: 5, refillPerSecond: 0 } })
    app.get('/', async () => 'ok')
    t.teardown(() => app.close())
    const codes: number[] = []
    for (let i = 0; i < 50; i++) codes.push((await app.inject({ url: '/', remoteAddress: `2001:db8:aa:bb:${((i * 7919) % 65536).toString(16)}::${i.toString(16)}` })).statusCode)
    t.equal(codes.filter((code) => code === 200).length, 5, '50 addresses, one /64, 5 admitted')
    t.same(await server.client(t).keys('tollgate:*'), ['tollgate:{ip:2001:db8:aa:bb::/64}:edge'])
  })
}
