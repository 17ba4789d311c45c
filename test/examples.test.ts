/**
 * Every example in examples/: how it limits (inject, manual clock), and that it
 * starts as `npm run example <name>` does and limits over real HTTP.
 */
import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import type { FastifyInstance, InjectOptions } from 'fastify'
import { EXAMPLES, type Example } from '../examples/example.js'
import { example as server } from '../examples/server.js'
import { example as edgeOnly } from '../examples/edge-only.js'
import { example as jwtTiers } from '../examples/jwt-tiers.js'
import { example as routeCost } from '../examples/route-cost.js'
import { example as apiKey } from '../examples/api-key.js'
import { example as shadow } from '../examples/shadow.js'
import { example as replicaShare } from '../examples/replica-share.js'
import { example as problemJson } from '../examples/problem-json.js'
import { example as login } from '../examples/login.js'
import { buildRedisServer } from '../examples/redis.js'
import { buildClusterServer } from '../examples/redis-cluster.js'
import { freePort, requireRedis, startCluster, startRedis } from './redis-server.js'
import { count, manualClock, statuses } from './helpers.js'
import { RUN, runExample } from './run-example.js'

// Every example in a child process, some on Redis: more than tap's 30 s on a busy machine.
t.setTimeout(120_000)

// Ten example processes started one after another, and a Redis cluster: about
// 25 s on a busy 2-core machine, too close to tap's default 30 s per file.
t.setTimeout(120_000)

async function start (t: Test, example: Example, env: NodeJS.ProcessEnv = {}) {
  const clock = manualClock()
  const app = await example.build({ clock: clock.now, env })
  t.teardown(() => app.close())
  return { app, clock }
}

const bearer = async (app: FastifyInstance, query: string): Promise<string> =>
  `Bearer ${(await app.inject(`/token?${query}`)).json<{ token: string }>().token}`

t.test('server (npm start): edge, tiers and an export with a quota', async (t) => {
  const { app } = await start(t, server)
  const alice = await bearer(app, 'user=alice')
  const victor = await bearer(app, 'user=victor&tier=vip')
  const exportAs = (authorization: string) => statuses(app, 3, { method: 'POST', url: '/export', headers: { authorization } })
  t.same(await exportAs(alice), [200, 200, 429], 'default: 20 tokens, cost 10')
  t.same(await exportAs(victor), [200, 200, 200], 'vip: a larger quota')
  const home = await app.inject({ url: '/', headers: { authorization: victor } })
  t.match(home.json(), { hello: { sub: 'victor', tier: 'vip' } })
  t.match(home.headers['ratelimit'], /^"edge";r=\d+;t=\d+, "app";r=169;t=1$/)
  t.equal(count(await statuses(app, 12, { url: '/', remoteAddress: '198.51.100.3' }), 200), 10, 'anonymous: 10 per IP')
  const health = await app.inject('/health')
  t.equal(health.statusCode, 200)
  t.equal(health.headers['ratelimit'], undefined, 'exempt')
})

t.test('edge-only: 10 per IP at once, then 2 per second', async (t) => {
  const { app, clock } = await start(t, edgeOnly)
  t.same(count(await statuses(app, 12), 200), 10)
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['ratelimit-policy'], '"edge";q=10;w=5')
  clock.advance(1000)
  t.same(await statuses(app, 3), [200, 200, 429], 'two tokens a second later')
  t.equal((await app.inject({ url: '/', remoteAddress: '203.0.113.9' })).statusCode, 200, 'another IP: its own bucket')
})

t.test('jwt-tiers: the tier claim picks the bucket; unknown tiers get default', async (t) => {
  const { app, clock } = await start(t, jwtTiers)
  const as = async (query: string) => count(await statuses(app, 60, { url: '/', headers: { authorization: await bearer(app, query) } }), 200)
  t.equal(await as('user=alice'), 10, 'default: 10')
  t.equal(await as('user=bob&tier=pro'), 50, 'pro: 50')
  t.equal(await as('user=eve&tier=admin'), 10, 'a tier that is not configured: default')
  clock.advance(30_000) // refills the anonymous IP bucket (3 tokens at 0.1/s) spent by the /token calls
  t.equal(count(await statuses(app, 6), 200), 3, 'anonymous: 3 per IP')
})

t.test('route-cost: costs, and an export quota of its own', async (t) => {
  const { app, clock } = await start(t, routeCost)
  const headers = { authorization: await bearer(app, 'user=alice') }
  const exportOnce: InjectOptions = { method: 'POST', url: '/export', headers }
  t.same(await statuses(app, 3, exportOnce), [200, 200, 429], 'two exports spend 20 tokens')
  clock.advance(10_000) // 20 tokens again, but the export quota refills one a minute
  const third = await app.inject(exportOnce)
  t.equal(third.statusCode, 429, 'the export quota is still empty')
  t.match(third.headers['ratelimit'], /"route";r=0/)
  const search = await app.inject({ url: '/search?size=100', headers })
  t.match(search.headers['ratelimit'], /^"app";r=16;/, 'size 100 costs 4')
  const items = await app.inject({ url: '/items', headers })
  t.match(items.headers['ratelimit'], /^"app";r=15;/, 'items cost 1')
  clock.advance(60_000)
  t.equal((await app.inject(exportOnce)).statusCode, 200, 'a minute later, one more export')
})

t.test('api-key: known keys have their own bucket; invented keys stay in the IP bucket', async (t) => {
  const { app } = await start(t, apiKey)
  const withKey = (key: string): InjectOptions => ({ url: '/', headers: { 'x-api-key': key } })
  t.same(await statuses(app, 6, withKey('key-acme-0001')), [200, 200, 200, 200, 200, 429])
  t.same(await statuses(app, 1, withKey('key-globex-0002')), [200], 'another customer')
  const invented = []
  for (let i = 0; i < 8; i++) invented.push((await app.inject(withKey(`made-up-${i}`))).statusCode)
  t.same(invented, [401, 401, 401, 401, 401, 429, 429, 429], 'rotating keys does not escape the IP bucket')
})

t.test('shadow: never refuses, counts would-be refusals', async (t) => {
  const { app } = await start(t, shadow)
  t.same(count(await statuses(app, 8), 200), 8)
  const last = await app.inject('/')
  t.equal(last.headers['ratelimit'], '"edge";r=0;t=5', 'headers still tell the truth')
  t.match((await app.inject('/stats')).json(), { wouldRefuse: { total: 4, byKey: { '{ip:127.0.0.1}:edge': 4 } } })
})

t.test('replica-share: each replica enforces its share of the quota', async (t) => {
  for (const [replicas, share] of [['3', 10], ['2', 15], ['1', 30]] as const) {
    const { app } = await start(t, replicaShare, { REPLICAS: replicas })
    t.equal(count(await statuses(app, 40), 200), share, `${replicas} replicas: ${share} each`)
  }
})

t.test('problem-json: refusals as RFC 9457 problem details, headers kept', async (t) => {
  const { app } = await start(t, problemJson)
  await statuses(app, 3)
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.match(refused.headers['content-type'], /^application\/problem\+json/)
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['ratelimit'], '"edge";r=0;t=3')
  t.same(refused.json(), {
    type: 'about:blank', title: 'Too Many Requests', status: 429, detail: 'Rate limit exceeded, retry in 1 second', instance: '/', retryAfterSeconds: 1
  })
  const missing = await app.inject('/nowhere')
  t.equal(missing.statusCode, 429, 'the edge covers unknown routes too')
})

t.test('login: only failed logins count, per account; success clears the account; an empty account gets 429 even with the right password', async (t) => {
  const { app, clock } = await start(t, login)
  const attempt = (account: string, password: string): InjectOptions => ({ method: 'POST', url: '/login', payload: { account, password } })
  const wrong = attempt('alice', 'guess')
  const right = attempt('alice', 'correct horse battery staple')
  t.same(await statuses(app, 3, wrong), [401, 401, 401])
  t.match((await app.inject(wrong)).json(), { attemptsLeft: 1 })
  t.same(await statuses(app, 1, right), [200], 'the right password, within the budget')
  t.same(await statuses(app, 6, attempt('Alice ', 'guess')), [401, 401, 401, 401, 401, 429], 'a success cleared the 4 failures: 5 again (the account name is normalised)')
  const refused = await app.inject(right)
  t.equal(refused.statusCode, 429, 'refused even with the right password')
  t.equal(refused.headers['retry-after'], '60')
  t.equal(refused.headers['cache-control'], 'no-store')
  t.match(refused.json(), { code: 'TOLLGATE_RATE_LIMITED', message: 'Rate limit exceeded, retry in 60 seconds' })
  t.same(await statuses(app, 1, attempt('bob', 'nope')), [401], "another account's failures are its own")
  clock.advance(59_999)
  t.equal((await app.inject(right)).statusCode, 429, 'a millisecond early')
  clock.advance(1)
  t.equal((await app.inject(right)).statusCode, 200, 'one token back a minute later: the right password passes, and clears the account')
  t.same(await statuses(app, 6, wrong), [401, 401, 401, 401, 401, 429], 'five failures again')
  clock.advance(3_600_000)
  const burst = await Promise.all(Array.from({ length: 12 }, async () => (await app.inject(attempt('bob', 'guess'))).statusCode))
  t.same([count(burst, 401), count(burst, 429)], [5, 7], 'twelve wrong guesses at once: five are checked, not twelve')
  t.equal((await app.inject({ method: 'POST', url: '/login', payload: { account: '' } })).statusCode, 400, 'the body is validated')
})

t.test('redis: two replicas share one quota', async (t) => {
  if (!requireRedis(t)) return
  const redis = await startRedis(t)
  const url = `redis://127.0.0.1:${redis.port}`
  const replicas = [await buildRedisServer(url), await buildRedisServer(url)] as const
  t.teardown(async () => { for (const app of replicas) await app.close() })
  const authorization = await bearer(replicas[0], 'user=alice')
  const exportOn = async (app: FastifyInstance) => (await app.inject({ method: 'POST', url: '/export', headers: { authorization } })).statusCode
  t.same([await exportOn(replicas[0]), await exportOn(replicas[1]), await exportOn(replicas[0])], [200, 200, 429], '20 tokens shared: two exports in all')
  t.equal((await redis.client(t).keys('tollgate:{user:alice}:*')).length, 2, 'the user and route buckets live in Redis')
})

t.test('redis: the app closes while Redis is away (the client is disconnected, not quit)', async (t) => {
  const app = await buildRedisServer(`redis://127.0.0.1:${await freePort()}`) // nothing listens there
  await t.resolves(app.close())
})

t.test('redis-cluster: two replicas share one quota on a 3-master cluster', async (t) => {
  if (!requireRedis(t)) return
  const cluster = await startCluster(t)
  const nodes = cluster.ports.map((port) => `127.0.0.1:${port}`).join(',')
  const replicas = [await buildClusterServer(nodes), await buildClusterServer(nodes)] as const
  t.teardown(async () => { for (const app of replicas) await app.close() })
  for (const app of replicas) await app.ready()
  const tokens = await Promise.all(['alice', 'bob', 'carol'].map(async (user) => bearer(replicas[0], `user=${user}`)))
  for (const authorization of tokens) {
    const codes = []
    for (let i = 0; i < 3; i++) codes.push((await (i % 2 === 0 ? replicas[0] : replicas[1]).inject({ method: 'POST', url: '/export', headers: { authorization } })).statusCode)
    t.same(codes, [200, 200, 429], 'two exports per user across both replicas')
  }
})

/**
 * Sends `times` requests at once, so that on a busy machine the bucket does not
 * refill while they arrive; returns their statuses. (The exact counts, over
 * time, are the inject tests' job above.)
 */
async function codes (url: string, times: number, init: RequestInit = {}): Promise<number[]> {
  return Promise.all(Array.from({ length: times }, async () => {
    const response = await fetch(url, init)
    await response.arrayBuffer()
    return response.status
  }))
}

async function token (url: string, query: string): Promise<RequestInit> {
  const { token } = await (await fetch(`${url}/token?${query}`)).json() as { token: string }
  return { headers: { authorization: `Bearer ${token}` } }
}

/** The demo API's POST /export: 20 tokens at cost 10, so two pass. */
const twoExports = async (url: string): Promise<{ statuses: number[], passes: number }> =>
  ({ statuses: await codes(`${url}/export`, 3, { method: 'POST', ...await token(url, 'user=alice') }), passes: 2 })

/** For each example: a burst that should meet its limit, and how many of it pass at least. */
const probes: Record<(typeof EXAMPLES)[number], (url: string) => Promise<{ statuses: number[], passes: number }>> = {
  server: async (url) => ({ statuses: await codes(`${url}/`, 25), passes: 10 }),
  'edge-only': async (url) => ({ statuses: await codes(`${url}/`, 25), passes: 10 }),
  'jwt-tiers': async (url) => ({ statuses: await codes(`${url}/`, 12, await token(url, 'user=alice')), passes: 10 }),
  'route-cost': twoExports,
  'api-key': async (url) => ({ statuses: await codes(`${url}/`, 7, { headers: { 'x-api-key': 'key-acme-0001' } }), passes: 5 }),
  shadow: async (url) => {
    const statuses = await codes(`${url}/`, 8)
    const { wouldRefuse } = await (await fetch(`${url}/stats`)).json() as { wouldRefuse: { total: number } }
    // Shadow mode never refuses: all 8 pass, and the would-be refusals stand in for a 429.
    return { statuses: [...statuses, wouldRefuse.total >= 1 ? 429 : 200], passes: 8 }
  },
  'replica-share': async (url) => ({ statuses: await codes(`${url}/`, 25), passes: 10 }),
  'problem-json': async (url) => ({ statuses: await codes(`${url}/`, 5), passes: 3 }),
  login: async (url) => {
    const send = (account: string, password: string) => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ account, password }) })
    const welcome = await codes(`${url}/login`, 1, send('bob', 'hunter2'))
    const guesses = await codes(`${url}/login`, 6, send('alice', 'guess'))
    // Five wrong guesses are checked (401); the sixth finds the account empty.
    return { statuses: [...welcome, ...guesses.map((status) => status === 401 ? 200 : status)], passes: 6 }
  },
  redis: twoExports,
  'redis-cluster': twoExports
}

t.test('every example starts with `npm run example <name>`, answers, and limits', async (t) => {
  for (const name of EXAMPLES) {
    await t.test(name, async (t) => {
      let env: NodeJS.ProcessEnv = {}
      if (name === 'redis' || name === 'redis-cluster') {
        if (!requireRedis(t)) return
        env = name === 'redis'
          ? { REDIS_URL: `redis://127.0.0.1:${(await startRedis(t)).port}` }
          : { REDIS_CLUSTER: (await startCluster(t)).ports.map((port) => `127.0.0.1:${port}`).join(',') }
      }
      const { url, banner } = await runExample(t, name, env)
      t.notMatch(banner, /NOT connected/, 'no warning when Redis is there')
      const { statuses, passes } = await probes[name](url)
      t.ok(count(statuses, 200) >= passes, `at least ${passes} pass (${count(statuses, 200)} of ${statuses.length})`)
      t.ok(count(statuses, 429) >= 1, `and the limit answers 429 (${count(statuses, 429)})`)
    })
  }
})

t.test('npm run example redis / redis-cluster say so when Redis is not connected at startup', async (t) => {
  const nowhere = `127.0.0.1:${await freePort()}` // nothing listens there
  for (const [name, env] of [['redis', { REDIS_URL: `redis://${nowhere}` }], ['redis-cluster', { REDIS_CLUSTER: nowhere }]] as const) {
    const { banner } = await runExample(t, name, env)
    t.match(banner, `WARNING: Redis at ${env.REDIS_URL ?? nowhere} is NOT connected`, name)
    t.match(banner, /each replica limits alone/, name)
  }
})

t.test('npm run example with an unknown name lists the examples and fails', async (t) => {
  const child = spawn(process.execPath, [RUN, 'nope'], { stdio: ['ignore', 'ignore', 'pipe'] })
  let errors = ''
  child.stderr.on('data', (chunk: Buffer) => { errors += String(chunk) })
  const code = await new Promise((resolve) => child.once('exit', resolve))
  t.equal(code, 1)
  t.match(errors, /npm run example edge-only/)
})
