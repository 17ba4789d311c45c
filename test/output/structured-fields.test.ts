/**
 * `RateLimit` and `RateLimit-Policy` as a strict RFC 9651 parser (the npm package
 * `structured-headers`) reads them, against draft-ietf-httpapi-ratelimit-headers:
 * each field is a List of Items whose value is a String naming the policy;
 * `RateLimit-Policy` members carry the Integer parameters `q` (quota, required)
 * and `w` (window, seconds); `RateLimit` members carry `r` (remaining, required)
 * and `t` (seconds until reset). Integers have at most 15 digits.
 */
import t, { type Test } from 'tap'
import Fastify, { type InjectOptions, type LightMyRequestResponse } from 'fastify'
import { Redis } from 'ioredis'
import { parseList, serializeList } from 'structured-headers'
import tollgate, { memoryStore, redisStore, type Store, type TollgateOptions } from '../../lib/index.js'
import { MAX_FIELD_INTEGER } from '../../lib/output/headers.js'
import { buildApp, manualClock } from '../helpers.js'
import { freePort, requireRedis, startRedis } from '../redis-server.js'

/** A parsed member: its name and its parameters. */
interface Member { name: string, params: Record<string, number> }

const POLICY_PARAMS = ['q', 'qu', 'w', 'pk']
const STATE_PARAMS = ['r', 't', 'pk']

/**
 * Parses one field strictly and checks its shape: Items (no Inner Lists) named by
 * Strings, only the parameters the draft defines, each an Integer from 0 to
 * 15 digits, `required` present; and the text is the parser's canonical form.
 */
function members (t: Test, field: string, text: unknown, known: string[], required: string): Member[] {
  t.type(text, 'string', `${field} is sent`)
  const list = parseList(String(text)) // throws on anything RFC 9651 rejects, e.g. 16 digits or 1e+21
  t.equal(serializeList(list), text, `${field} is in canonical form`)
  return list.map(([value, parameters]) => {
    t.notOk(Array.isArray(value), `${field}: an Item, not an Inner List`)
    t.type(value, 'string', `${field}: the policy name is a String`)
    const params: Record<string, number> = {}
    for (const [key, param] of parameters) {
      t.ok(known.includes(key), `${field}: \`${key}\` is a parameter the draft defines`)
      t.ok(Number.isInteger(param) && (param as number) >= 0 && (param as number) <= MAX_FIELD_INTEGER, `${field}: ${key}=${String(param)} is an Integer of at most 15 digits`)
      params[key] = param as number
    }
    t.ok(required in params, `${field}: \`${required}\` is present`)
    return { name: value as string, params }
  })
}

/** Both fields of a response, parsed. */
function fields (t: Test, response: LightMyRequestResponse): { policy: Member[], state: Member[] } {
  return {
    policy: members(t, 'RateLimit-Policy', response.headers['ratelimit-policy'], POLICY_PARAMS, 'q'),
    state: members(t, 'RateLimit', response.headers.ratelimit, STATE_PARAMS, 'r')
  }
}

/** `Retry-After` is delay-seconds: digits only, at most 15 of them. */
function retryAfter (t: Test, response: LightMyRequestResponse): number {
  const text = String(response.headers['retry-after'])
  t.match(text, /^[1-9][0-9]{0,14}$/, `Retry-After ${text} is whole seconds, at most 15 digits`)
  return Number(text)
}

const route = (path: string, quota: { capacity: number, refillPerSecond: number }) => ({ method: 'GET' as const, url: path, config: { rateLimit: { quota: { default: quota } } }, handler: async () => 'ok' })

t.test('both layers and a route quota, allowed and refused by each, parse as the draft defines', async (t) => {
  const { app } = await buildApp({
    edge: { capacity: 8, refillPerSecond: 4 },
    app: { tiers: { default: { capacity: 5, refillPerSecond: 1 } } }
  })
  app.route(route('/report', { capacity: 2, refillPerSecond: 0.05 }))
  app.get('/', async () => 'ok')
  const send = (options: InjectOptions | string) => app.inject(options)

  const policy = [
    { name: 'edge', params: { q: 8, w: 2 } },
    { name: 'app', params: { q: 5, w: 5 } },
    { name: 'route', params: { q: 2, w: 40 } }
  ]
  const allowed = await send('/report')
  t.equal(allowed.statusCode, 200)
  t.same(fields(t, allowed), {
    policy,
    state: [{ name: 'edge', params: { r: 7, t: 1 } }, { name: 'app', params: { r: 4, t: 1 } }, { name: 'route', params: { r: 1, t: 20 } }]
  }, 'allowed: every member, edge first, then the app layer\'s two')

  t.equal((await send('/report')).statusCode, 200)
  const byRoute = await send('/report')
  t.equal(byRoute.statusCode, 429)
  t.same(fields(t, byRoute), {
    policy,
    state: [{ name: 'edge', params: { r: 5, t: 1 } }, { name: 'app', params: { r: 3, t: 2 } }, { name: 'route', params: { r: 0, t: 40 } }]
  }, 'refused by the route quota: nothing taken from the app bucket')
  t.equal(retryAfter(t, byRoute), 20, 'one route token at 0.05/s')

  t.equal((await send('/')).statusCode, 200)
  t.equal((await send('/')).statusCode, 200)
  t.equal((await send('/')).statusCode, 200)
  const byApp = await send('/')
  t.equal(byApp.statusCode, 429)
  t.same(fields(t, byApp), {
    policy: policy.slice(0, 2),
    state: [{ name: 'edge', params: { r: 1, t: 2 } }, { name: 'app', params: { r: 0, t: 5 } }]
  }, 'refused by the app layer: both layers, no route member on a route without a quota')
  t.equal(retryAfter(t, byApp), 1)

  t.equal((await send('/')).statusCode, 429, 'the edge\'s last token, then the app layer refuses')

  const byEdge = await send('/')
  t.equal(byEdge.statusCode, 429)
  t.same(fields(t, byEdge), {
    policy: policy.slice(0, 1),
    state: [{ name: 'edge', params: { r: 0, t: 2 } }]
  }, 'refused at the edge: the app layer never ran')
  t.equal(retryAfter(t, byEdge), 1)
  await app.close()
})

/** The trio styles' fields: limit, remaining, reset. */
const TRIOS = {
  legacy: ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'],
  'draft-03': ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset']
} as const

/** Runs on a fresh store from `storeFor` per header style (its clock never moves). */
async function largestOn (t: Test, storeFor: (headers: string) => Store): Promise<void> {
  const largest = { capacity: 1e12, refillPerSecond: 1e12 }
  const slowest = { capacity: 1e12, refillPerSecond: 100 } // 1e10 s to fill: the bound
  for (const headers of ['draft', 'legacy', 'draft-03'] as const) {
    const app = Fastify()
    await app.register(tollgate, { store: storeFor(headers), headers, edge: slowest, app: { tiers: { default: largest } } })
    app.route(route('/once', { capacity: 1, refillPerSecond: 1e-10 }))
    t.equal((await app.inject('/once')).statusCode, 200)
    const refused = await app.inject('/once')
    t.equal(refused.statusCode, 429)
    t.equal(retryAfter(t, refused), 1e10, 'one token at 1e-10 per second')
    if (headers === 'draft') {
      t.same(fields(t, refused), {
        policy: [{ name: 'edge', params: { q: 1e12, w: 1e10 } }, { name: 'app', params: { q: 1e12, w: 1 } }, { name: 'route', params: { q: 1, w: 1e10 } }],
        state: [{ name: 'edge', params: { r: 1e12 - 2, t: 1 } }, { name: 'app', params: { r: 1e12 - 1, t: 1 } }, { name: 'route', params: { r: 0, t: 1e10 } }]
      })
    } else {
      t.same(TRIOS[headers].map((name) => refused.headers[name]), ['1', '0', '10000000000'], headers)
    }
    await app.close()
  }
}

t.test('at the largest policies startup accepts, every number is an Integer of at most 15 digits', async (t) => {
  await t.test('memory store', async (t) => { await largestOn(t, () => memoryStore({ clock: manualClock().now })) })
  if (requireRedis(t)) {
    await t.test('Redis store', async (t) => {
      const server = await startRedis(t)
      const client = server.client(t)
      await largestOn(t, (headers) => redisStore({ client, prefix: `${headers}:`, clock: manualClock().now, heartbeatIntervalMs: 0, timeoutMs: 2000 }))
    })
  }
})

/** A store that answers every step with `tokens` and `retryAfterMs`, as a faulty custom store might. */
function oddStore (tokens: number, retryAfterMs: number, policies?: Array<{ capacity: number, refillPerSecond: number }>): Store {
  return {
    consume: (buckets) => ({ allowed: false, tokens: buckets.map(() => tokens), retryAfterMs, ...(policies === undefined ? {} : { policies }) }),
    close () {}
  }
}

t.test('odd answers from a custom store still print whole numbers from 0 to 15 digits', async (t) => {
  const edge = { capacity: 10, refillPerSecond: 2 }
  const cases: Array<[string, Store, string, string, string | undefined]> = [
    ['negative tokens (a debt: 15 tokens to full at 2/s)', oddStore(-5, 2500), '"edge";q=10;w=5', '"edge";r=0;t=8', '3'],
    ['NaN tokens and wait', oddStore(Number.NaN, Number.NaN), '"edge";q=10;w=5', '"edge";r=0;t=5', undefined],
    ['huge tokens and wait', oddStore(1e300, 1e300), '"edge";q=10;w=5', '"edge";r=10;t=0', String(MAX_FIELD_INTEGER)],
    ['infinite tokens, negative wait', oddStore(Infinity, -1), '"edge";q=10;w=5', '"edge";r=10;t=0', '1'],
    ['huge applied policies (never full: no t)', oddStore(1e20, 1, [{ capacity: 1e300, refillPerSecond: 1e-300 }]),
      `"edge";q=${MAX_FIELD_INTEGER};w=${MAX_FIELD_INTEGER}`, `"edge";r=${MAX_FIELD_INTEGER}`, '1'],
    ['NaN applied policies', oddStore(3, 1, [{ capacity: Number.NaN, refillPerSecond: Number.NaN }]), '"edge";q=0', '"edge";r=0', '1']
  ]
  for (const [name, store, policy, state, wait] of cases) {
    for (const headers of ['draft', 'legacy', 'draft-03'] as const) {
      const app = Fastify()
      await app.register(tollgate, { store, edge, headers })
      app.get('/', async () => 'ok')
      const refused = await app.inject('/')
      t.equal(refused.statusCode, 429, name)
      t.equal(refused.headers['retry-after'], wait, `${name}: Retry-After`)
      if (headers === 'draft') {
        t.equal(refused.headers['ratelimit-policy'], policy, `${name}: RateLimit-Policy`)
        t.equal(refused.headers.ratelimit, state, `${name}: RateLimit`)
        fields(t, refused)
      } else {
        t.type(refused.headers[TRIOS[headers][0]], 'string', `${name}: ${headers} sends its limit`)
        for (const header of TRIOS[headers]) {
          const value = refused.headers[header]
          if (value !== undefined) t.match(value, /^(0|[1-9][0-9]{0,14})$/, `${name}: ${header} ${String(value)}`)
        }
      }
      await app.close()
    }
  }
})

t.test("the Redis store's local share stays within 15 digits, however many replicas share the quota", async (t) => {
  // A dead Redis: every call fails at once and the store decides on this replica's local share.
  const client = new Redis({ port: await freePort(), lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  // The local share floors capacity at 1 token but scales the rate by (1 + 0.2) / replicas,
  // so the slowest bucket allowed (1 token per 1e10 s) takes 1e10 × 1e6 / 1.2 ≈ 8.3e15 s to fill here.
  const options: TollgateOptions = {
    store: redisStore({ client, heartbeatIntervalMs: 0, replicas: 1_000_000, breakerThreshold: 1 }),
    edge: { capacity: 1, refillPerSecond: 1e-10 }
  }
  const app = Fastify()
  await app.register(tollgate, options)
  app.get('/', async () => 'ok')
  t.teardown(() => app.close())
  const first = await app.inject('/')
  t.equal(first.statusCode, 200)
  t.same(fields(t, first), {
    policy: [{ name: 'edge', params: { q: 1, w: MAX_FIELD_INTEGER } }],
    state: [{ name: 'edge', params: { r: 0, t: MAX_FIELD_INTEGER } }]
  }, 'decided locally, clamped to the largest Integer')
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(retryAfter(t, refused), MAX_FIELD_INTEGER)
})
