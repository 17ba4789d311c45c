/**
 * FRL's test/global-rate-limit.test.js, part 3: a `max` per request, FRL's
 * default `max`, and hiding headers. FRL's `enableDraftSpec` cases are in
 * global-draft-spec, its async `max` in global-async.
 */
import t from 'tap'
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify'
import tollgate from '../../lib/index.js'
import { failure } from '../helpers.js'
import { frlApp, JSON_TYPE, trio } from './frl.js'

t.test('FRL: variable max', async (t) => {
  // Differs: `max: (req) => …` becomes a quota carried by the identity (`Identity.quota`,
  // within `app.maxQuota`), named by `app.identify`, in the app layer.
  // (A quota read from a request header, as FRL's test does, is the client's choice:
  // in practice it comes from a verified token, `app.quotaClaim`.)
  const calls: FastifyRequest[] = []
  const { app } = await frlApp({
    app: {
      tiers: { default: { capacity: 1, refillPerSecond: 1 } },
      maxQuota: { capacity: 1000, refillPerSecond: 1000 },
      identify: (request) => {
        calls.push(request)
        const max = Number(request.headers['secret-max'])
        return { id: request.ip, quota: { capacity: max, refillPerSecond: max } }
      }
    }
  })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello')
  const response = await app.inject({ url: '/', headers: { 'secret-max': '50' } })
  t.strictSame(trio(response), { status: 200, limit: '50', remaining: '49', reset: '1' })
  t.equal(calls.length, 1)
})

t.test('FRL: variable max contenders', async (t) => {
  // Differs: FRL's `max: (req, key) => key === 'pro' ? 3 : 2` with a key per API key is
  // the app layer: `app.identify` names the user and their tier, each tier a policy.
  const { app } = await frlApp({
    app: {
      tiers: { default: { capacity: 2, refillPerSecond: 2 / 10 }, pro: { capacity: 3, refillPerSecond: 3 / 10 } },
      identify: (request) => {
        const key = String(request.headers['api-key'])
        return { id: key, tier: key === 'pro' ? 'pro' : 'default' }
      }
    }
  })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello')
  const sequence = [['pro', 200], ['pro', 200], ['pro', 200], ['pro', 429], ['NOT', 200], ['NOT', 200], ['NOT', 429]] as const
  for (const [key, status] of sequence) t.equal((await app.inject({ url: '/', headers: { 'api-key': key } })).statusCode, status)
})

t.test('FRL: when passing NaN to max variable then it should use the default max - 1000', async (t) => {
  // Differs by design: no default `max`; NaN fails startup, naming the option.
  const nan = await failure(async () => { await Fastify().register(tollgate, { edge: { capacity: NaN, refillPerSecond: 1000 / 60 } }) })
  t.equal(nan.code, 'TOLLGATE_INVALID_OPTION')
  t.match(nan.message, 'Expected `edge.capacity` to be a finite number ≥ 1, got `NaN`')
  // FRL's defaults written out: 1000 a minute.
  const { app } = await frlApp({ edge: { capacity: 1000, refillPerSecond: 1000 / 60 } })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello')
  const seen = new Set<string>()
  for (let i = 0; i < 1000; i++) {
    const response = await app.inject('/')
    seen.add(`${response.statusCode} ${String(response.headers['x-ratelimit-limit'])}`)
  }
  t.strictSame([...seen], ['200 1000'], '1000 pass, each with X-RateLimit-Limit: 1000')
  t.match(trio(await app.inject('/')), { status: 429, limit: '1000' })
})

/** An onSend hook that removes FRL's header trio from the responses `when` picks (MIGRATING: one header switch; drop single headers in onSend). */
function removeTrio (when: (reply: FastifyReply) => boolean) {
  return async (_request: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> => {
    if (when(reply)) reply.removeHeader('x-ratelimit-limit').removeHeader('x-ratelimit-remaining').removeHeader('x-ratelimit-reset')
    return payload
  }
}

t.test('FRL: hide rate limit headers', async (t) => {
  // Differs: `addHeaders` (the 429's headers) has no per-header switch: an onSend hook
  // removes them. A 429 keeps its Retry-After (FRL could hide it).
  const { app, clock } = await frlApp({ edge: { capacity: 1, refillPerSecond: 1 } })
  t.teardown(() => app.close())
  app.addHook('onSend', removeTrio((reply) => reply.statusCode === 429))
  app.get('/', async () => 'hello')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '1', remaining: '0', reset: '1' })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '1', remaining: '0', reset: '1' })
})

t.test('FRL: hide rate limit headers on exceeding', async (t) => {
  // Differs: `addHeadersOnExceeding` (an admitted response's headers): the same onSend hook,
  // on the responses that are not refusals.
  const { app, clock } = await frlApp({ edge: { capacity: 1, refillPerSecond: 1 } })
  t.teardown(() => app.close())
  app.addHook('onSend', removeTrio((reply) => reply.statusCode !== 429))
  app.get('/', async () => 'hello')
  t.strictSame(trio(await app.inject('/')), { status: 200 })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '1', remaining: '0', reset: '1', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200 })
})

t.test('FRL: hide rate limit headers at all times', async (t) => {
  // Differs: all the rate-limit headers off is `headers: false`; a 429 still carries
  // Retry-After and Cache-Control: no-store (FRL hides Retry-After too).
  const { app, clock } = await frlApp({ headers: false, edge: { capacity: 1, refillPerSecond: 1 } })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello')
  t.strictSame(trio(await app.inject('/')), { status: 200 })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, retryAfter: '1' })
  t.equal(refused.headers['cache-control'], 'no-store')
  t.equal(refused.headers['content-type'], JSON_TYPE)
  t.equal(refused.headers['ratelimit'], undefined)
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200 })
})
