import t from 'tap'
import Fastify from 'fastify'
import tollgate, { memoryStore, type HeaderStyle, type Store } from '../../lib/index.js'
import { buildApp, buildAppOn } from '../helpers.js'
import { namedPolicy, retryAfterSeconds, stateMember } from '../../lib/output/headers.js'

const layers = { edge: { capacity: 100, refillPerSecond: 50 }, app: { tiers: { default: { capacity: 20, refillPerSecond: 5 } } } }

t.test('both layers appear in RateLimit and RateLimit-Policy, edge first, on allowed responses', async (t) => {
  const { app } = await buildApp(layers)
  app.get('/', async () => 'ok')
  const response = await app.inject('/')
  t.equal(response.statusCode, 200)
  t.equal(response.headers['ratelimit-policy'], '"edge";q=100;w=2, "app";q=20;w=4')
  t.equal(response.headers['ratelimit'], '"edge";r=99;t=1, "app";r=19;t=1')
  t.equal(response.headers['retry-after'], undefined, 'no Retry-After on an allowed response')
  await app.close()
})

t.test("another limiter's members stay first, as it wrote them, request after request", async (t) => {
  const app = Fastify()
  let sent = 0
  const others: unknown[] = ['"other";q=5', '"other";q=6', ['"a";q=1', '"b";q=2'], 7, '"other";q=6']
  app.addHook('onRequest', async (_request, reply) => {
    const other = others[sent++]
    reply.header('ratelimit-policy', other)
    reply.header('ratelimit', other)
  })
  await app.register(tollgate, { store: memoryStore(), ...layers })
  app.get('/', async () => 'ok')
  const expected = ['"other";q=5', '"other";q=6', '"a";q=1,"b";q=2', '7', '"other";q=6']
  for (const before of expected) {
    const response = await app.inject('/')
    t.equal(response.headers['ratelimit-policy'], `${before}, "edge";q=100;w=2, "app";q=20;w=4`)
    t.match(response.headers['ratelimit'], `${before}, "edge";r=`)
  }
  await app.close()
})

t.test('a refusal by the app layer carries both layers, Retry-After and no-store', async (t) => {
  const { app, clock } = await buildApp(layers)
  app.post('/export', { config: { rateLimit: { cost: 20 } } }, async () => 'ok')
  t.equal((await app.inject({ method: 'POST', url: '/export' })).statusCode, 200)
  clock.set(100)
  const refused = await app.inject({ method: 'POST', url: '/export' })
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['ratelimit'], '"edge";r=99;t=1, "app";r=0;t=4', 'the edge refilled 5 tokens in 100 ms, capped at 100, then took 1')
  t.equal(refused.headers['ratelimit-policy'], '"edge";q=100;w=2, "app";q=20;w=4')
  t.equal(refused.headers['retry-after'], '4', '19.5 tokens at 5/s = 3.9 s, rounded up')
  t.equal(refused.headers['cache-control'], 'no-store')
  t.match(refused.json(), { statusCode: 429, code: 'TOLLGATE_RATE_LIMITED', error: 'Too Many Requests', message: 'Rate limit exceeded, retry in 4 seconds' })
  await app.close()
})

t.test('Retry-After is whole seconds, rounded up, at least 1', async (t) => {
  t.equal(retryAfterSeconds(1), 1)
  t.equal(retryAfterSeconds(0), 1)
  t.equal(retryAfterSeconds(1000), 1)
  t.equal(retryAfterSeconds(1001), 2)
  t.equal(retryAfterSeconds(Infinity), undefined, 'never: no number would be true')
})

t.test('a quota that never refills: no w, no t, and no Retry-After on refusal', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 } })
  app.get('/', async () => 'ok')
  const first = await app.inject('/')
  t.equal(first.headers['ratelimit-policy'], '"edge";q=1')
  t.equal(first.headers['ratelimit'], '"edge";r=0')
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], undefined)
  t.equal(refused.json().message, 'Rate limit exceeded: this quota does not refill', 'no "retry in never"')
  await app.close()
})

t.test('members format whole numbers: r floors, t and w round up', async (t) => {
  const bucket = namedPolicy('app', { capacity: 10, refillPerSecond: 3 })
  t.equal(bucket.policyMember, '"app";q=10;w=4')
  t.equal(stateMember(bucket, 9.99), '"app";r=9;t=1')
  t.equal(stateMember(bucket, 10), '"app";r=10;t=0', 'full')
  t.equal(namedPolicy('edge', { capacity: 10.5, refillPerSecond: 1 }).policyMember, '"edge";q=10;w=11', 'a fractional replica share shows whole tokens')
})

t.test("headers: 'legacy' sends the X-RateLimit trio of the most constrained bucket", async (t) => {
  const { app } = await buildApp({ ...layers, headers: 'legacy' })
  app.get('/', async () => 'ok')
  const response = await app.inject('/')
  t.equal(response.headers['ratelimit'], undefined)
  t.equal(response.headers['ratelimit-policy'], undefined)
  t.equal(response.headers['x-ratelimit-limit'], '20', 'the app bucket has fewer tokens left than the edge')
  t.equal(response.headers['x-ratelimit-remaining'], '19')
  t.equal(response.headers['x-ratelimit-reset'], '1')
  await app.close()

  const edgeTighter = await buildApp({ edge: { capacity: 5, refillPerSecond: 0 }, app: layers.app, headers: 'legacy' })
  edgeTighter.app.get('/', async () => 'ok')
  const tight = await edgeTighter.app.inject('/')
  t.equal(tight.headers['x-ratelimit-limit'], '5', 'the edge stays when it is the tighter one')
  t.equal(tight.headers['x-ratelimit-remaining'], '4')
  t.equal(tight.headers['x-ratelimit-reset'], undefined, 'never resets: left out')
  await edgeTighter.app.close()
})

t.test("legacy: a tighter later bucket that never refills drops the earlier reset", async (t) => {
  const { app } = await buildApp({ edge: { capacity: 100, refillPerSecond: 1 }, app: { tiers: { default: { capacity: 2, refillPerSecond: 0 } } }, headers: 'legacy' })
  app.get('/', async () => 'ok')
  const response = await app.inject('/')
  t.equal(response.headers['x-ratelimit-limit'], '2')
  t.equal(response.headers['x-ratelimit-reset'], undefined)
  await app.close()
})

t.test("headers: 'draft-03' sends RateLimit-Limit, -Remaining and -Reset of the most constrained bucket", async (t) => {
  const { app, clock } = await buildApp({ ...layers, headers: 'draft-03' })
  app.post('/export', { config: { rateLimit: { cost: 20 } } }, async () => 'ok')
  app.get('/', async () => 'ok')
  const response = await app.inject('/')
  t.equal(response.headers['ratelimit'], undefined)
  t.equal(response.headers['ratelimit-policy'], undefined)
  t.equal(response.headers['x-ratelimit-limit'], undefined)
  t.equal(response.headers['ratelimit-limit'], '20', 'the app bucket has fewer tokens left than the edge')
  t.equal(response.headers['ratelimit-remaining'], '19')
  t.equal(response.headers['ratelimit-reset'], '1', '1 token at 5/s: 0.2 s, rounded up')
  clock.set(800)
  t.equal((await app.inject({ method: 'POST', url: '/export' })).statusCode, 200, 'the app bucket full again: all 20 taken')
  clock.set(900)
  const refused = await app.inject({ method: 'POST', url: '/export' })
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['ratelimit-limit'], '20')
  t.equal(refused.headers['ratelimit-remaining'], '0')
  t.equal(refused.headers['ratelimit-reset'], '4', '0.5 tokens: 19.5 to full at 5/s = 3.9 s, rounded up')
  t.equal(refused.headers['retry-after'], '4', 'the same 19.5 tokens for a cost of 20')
  t.equal(refused.headers['cache-control'], 'no-store')
  await app.close()

  const edgeTighter = await buildApp({ edge: { capacity: 5, refillPerSecond: 0 }, app: layers.app, headers: 'draft-03' })
  edgeTighter.app.get('/', async () => 'ok')
  const tight = await edgeTighter.app.inject('/')
  t.equal(tight.headers['ratelimit-limit'], '5', 'the edge stays when it is the tighter one')
  t.equal(tight.headers['ratelimit-remaining'], '4')
  t.equal(tight.headers['ratelimit-reset'], undefined, 'never full again: left out')
  await edgeTighter.app.close()
})

/** A store that lets the buckets of a capacity in `open` through uncounted, and takes one token from the others (full before). */
function partlyOpenStore (open: number[]): Store {
  return {
    consume: (buckets) => open.includes(buckets[0]?.policy.capacity ?? 0)
      ? { allowed: true, tokens: buckets.map((bucket) => bucket.policy.capacity), retryAfterMs: 0, degraded: 'open' }
      : { allowed: true, tokens: buckets.map((bucket) => bucket.policy.capacity - 1), retryAfterMs: 0 },
    close () {}
  }
}

t.test('an uncounted pass (degraded open) sends the policies alone, in every style', async (t) => {
  const trios = { legacy: ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'], 'draft-03': ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset'] }
  const headersOf = async (style: HeaderStyle, open: number[]): Promise<Record<string, unknown>> => {
    const app = await buildAppOn(partlyOpenStore(open), { ...layers, headers: style })
    app.get('/', async () => 'ok')
    const response = await app.inject('/')
    t.equal(response.statusCode, 200)
    await app.close()
    return response.headers
  }
  const draft = await headersOf('draft', [100, 20])
  t.equal(draft['ratelimit-policy'], '"edge";q=100;w=2, "app";q=20;w=4', 'both layers open: both policies')
  t.equal(draft['ratelimit'], undefined, 'no state: it is unknown')
  const appOpen = await headersOf('draft', [20])
  t.equal(appOpen['ratelimit-policy'], '"edge";q=100;w=2, "app";q=20;w=4')
  t.equal(appOpen['ratelimit'], '"edge";r=99;t=1', 'the counted edge keeps its state')
  for (const [style, [limit, remaining, reset]] of Object.entries(trios) as Array<[HeaderStyle, string[]]>) {
    const both = await headersOf(style, [100, 20])
    t.same([both[limit as string], both[remaining as string], both[reset as string]], ['20', undefined, undefined], `${String(style)}, both open: the smaller limit alone`)
    const edgeOpen = await headersOf(style, [100])
    t.same([edgeOpen[limit as string], edgeOpen[remaining as string], edgeOpen[reset as string]], ['20', '19', '1'], `${String(style)}, edge open: the counted app's trio`)
    const onlyApp = await headersOf(style, [20])
    t.same([onlyApp[limit as string], onlyApp[remaining as string], onlyApp[reset as string]], ['100', '99', '1'], `${String(style)}, app open: the counted edge's trio stays whole`)
    t.equal(onlyApp['ratelimit-policy'], undefined)
  }
  const none = await headersOf(false, [100, 20])
  t.equal(none['ratelimit-policy'], undefined)
  t.equal(none['x-ratelimit-limit'], undefined)
})

t.test('headers: false sends no rate-limit headers, but a refusal keeps Retry-After', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 1 }, headers: false })
  app.get('/', async () => 'ok')
  const first = await app.inject('/')
  t.equal(first.headers['ratelimit'], undefined)
  t.equal(first.headers['x-ratelimit-limit'], undefined)
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['ratelimit'], undefined)
  await app.close()
})

t.test('exact waits: per(2, 3 s) says 2 seconds where 2 is exact, in Retry-After, the message, t= and x-ratelimit-reset', async (t) => {
  const twoPerThree = { capacity: 2, refillPerSecond: 2 / 3 }
  t.equal(stateMember(namedPolicy('app', twoPerThree), 2 / 3), '"app";r=0;t=2', '2/3 held: full in 2 s, not 3')
  for (const headers of ['draft', 'legacy'] as const) {
    const { app, clock } = await buildApp({ app: { tiers: { default: twoPerThree } }, headers })
    app.get('/', { config: { rateLimit: { cost: 2 } } }, async () => 'ok')
    t.equal((await app.inject('/')).statusCode, 200)
    clock.set(1000)
    const refused = await app.inject('/')
    t.equal(refused.statusCode, 429, `${headers}: 2/3 of a token after 1 s`)
    t.equal(refused.headers['retry-after'], '2', `${headers}: (2 − 2/3) / (2/3) s is 2 s, not 3`)
    t.equal(refused.json().message, 'Rate limit exceeded, retry in 2 seconds')
    if (headers === 'draft') t.equal(refused.headers['ratelimit'], '"app";r=0;t=2')
    else t.equal(refused.headers['x-ratelimit-reset'], '2')
    clock.set(3000)
    t.equal((await app.inject('/')).statusCode, 200, `${headers}: full again at 3 s, when Retry-After said`)
    await app.close()
  }
})
