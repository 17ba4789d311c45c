/**
 * FRL's test/global-rate-limit.test.js, the `enableDraftSpec` cases: `headers:
 * 'draft-03'`, FRL's three draft fields (`ratelimit-limit`, `ratelimit-remaining`,
 * `ratelimit-reset`), the same numbers as the legacy trio (README, "Headers").
 */
import t from 'tap'
import type { FastifyReply, FastifyRequest, LightMyRequestResponse } from 'fastify'
import { RateLimitedError } from '../../lib/index.js'
import { frlApp, JSON_TYPE } from './frl.js'

/** The three draft-03 fields present on a response, and its status. */
function draft (response: LightMyRequestResponse): Record<string, string | number> {
  const read: Record<string, string | number> = { status: response.statusCode }
  for (const name of ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset', 'retry-after']) {
    const value = response.headers[name]
    if (value !== undefined) read[name] = String(value)
  }
  return read
}

t.test('FRL: With enabled IETF Draft Spec', async (t) => {
  // Differs: `errorResponseBuilder` is `setErrorHandler`; FRL's `ttl` (until its window
  // ends) is `decision.retryAfterMs` (until this request passes), and Retry-After is it
  // rounded up (FRL: rounded down).
  const { app, clock } = await frlApp({ headers: 'draft-03', edge: { capacity: 2, refillPerSecond: 2 } })
  t.teardown(() => app.close())
  app.setErrorHandler((error, _request, reply) => {
    if (!(error instanceof RateLimitedError)) return reply.send(error)
    return reply.code(429).send({ statusCode: 429, error: 'Too Many Requests', message: 'Rate limit exceeded, retry in 1 second', ttl: error.decision.retryAfterMs })
  })
  app.get('/', async () => 'hello!')
  t.strictSame(draft(await app.inject('/')), { status: 200, 'ratelimit-limit': '2', 'ratelimit-remaining': '1', 'ratelimit-reset': '1' })
  const second = await app.inject('/')
  t.strictSame(draft(second), { status: 200, 'ratelimit-limit': '2', 'ratelimit-remaining': '0', 'ratelimit-reset': '1' })
  t.equal(second.headers['x-ratelimit-limit'], undefined, 'the draft fields instead of the X-RateLimit trio')
  t.equal(second.headers['ratelimit-policy'], undefined, 'and instead of the newer draft')
  const refused = await app.inject('/')
  t.strictSame(draft(refused), { status: 429, 'ratelimit-limit': '2', 'ratelimit-remaining': '0', 'ratelimit-reset': '1', 'retry-after': '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  const { ttl, ...payload } = refused.json<{ ttl: number, statusCode: number, error: string, message: string }>()
  t.equal(refused.headers['retry-after'], String(Math.ceil(ttl / 1000)))
  t.strictSame(payload, { statusCode: 429, error: 'Too Many Requests', message: 'Rate limit exceeded, retry in 1 second' })
  clock.advance(1100)
  t.strictSame(draft(await app.inject('/')), { status: 200, 'ratelimit-limit': '2', 'ratelimit-remaining': '1', 'ratelimit-reset': '1' })
})

t.test('FRL: hide IETF draft spec headers', async (t) => {
  // Differs: no per-header switch; an onSend hook removes them from the 429. Retry-After stays.
  const { app, clock } = await frlApp({ headers: 'draft-03', edge: { capacity: 1, refillPerSecond: 1 } })
  t.teardown(() => app.close())
  app.addHook('onSend', async (_request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    if (reply.statusCode === 429) reply.removeHeader('ratelimit-limit').removeHeader('ratelimit-remaining').removeHeader('ratelimit-reset')
    return payload
  })
  app.get('/', async () => 'hello')
  t.strictSame(draft(await app.inject('/')), { status: 200, 'ratelimit-limit': '1', 'ratelimit-remaining': '0', 'ratelimit-reset': '1' })
  const refused = await app.inject('/')
  t.strictSame(draft(refused), { status: 429, 'retry-after': '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  clock.advance(1100)
  t.strictSame(draft(await app.inject('/')), { status: 200, 'ratelimit-limit': '1', 'ratelimit-remaining': '0', 'ratelimit-reset': '1' })
})

t.test('FRL: afterReset and Rate Limit remain the same when enableDraftSpec is enabled', async (t) => {
  // Same: one token per 10 s; `ratelimit-reset` (until full) and Retry-After (until this
  // request passes) agree for a bucket of one: 10 s at 0.5 s, 9 s at 1.5 s.
  const { app, clock } = await frlApp({ headers: 'draft-03', edge: { capacity: 1, refillPerSecond: 1 / 10 } })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  t.strictSame(draft(await app.inject('/')), { status: 200, 'ratelimit-limit': '1', 'ratelimit-remaining': '0', 'ratelimit-reset': '10' })
  clock.advance(500)
  t.strictSame(draft(await app.inject('/')), { status: 429, 'ratelimit-limit': '1', 'ratelimit-remaining': '0', 'ratelimit-reset': '10', 'retry-after': '10' })
  clock.advance(1000)
  t.strictSame(draft(await app.inject('/')), { status: 429, 'ratelimit-limit': '1', 'ratelimit-remaining': '0', 'ratelimit-reset': '9', 'retry-after': '9' })
})
