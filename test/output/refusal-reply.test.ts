// The body of a refusal answered from the hook (lib/output/refusal-reply.ts) against
// the body Fastify's default error handler writes for the refusal's error.
import Fastify from 'fastify'
import t from 'tap'
import { PenalizedError, RateLimitedError, type LimitDecision } from '../../lib/index.js'
import { PENALIZED, RATE_LIMITED } from '../../lib/output/errors.js'
import { retryAfterSeconds } from '../../lib/output/headers.js'
import { REFUSAL_BODIES, RefusalBodies } from '../../lib/output/refusal-reply.js'

const decision = (retryAfterMs: number, cost = 1, capacity = 5): LimitDecision => ({
  layer: 'app', allowed: false, cost, retryAfterMs,
  buckets: [{ name: 'app', key: '{user:u}:app', capacity, refillPerSecond: 0, tokens: 0 }]
})

/** The body Fastify's default error handler writes for `error`. */
async function fastifyBody (error: Error): Promise<{ body: string, length: string | undefined }> {
  const app = Fastify()
  app.get('/', async () => { throw error })
  const response = await app.inject('/')
  await app.close()
  return { body: response.body, length: response.headers['content-length'] as string | undefined }
}

t.test('each body is the one Fastify writes for the refusal\'s error', async (t) => {
  const decisions = [decision(1), decision(1000), decision(1001), decision(359_500), decision(Infinity), decision(Infinity, 9)]
  for (const [bodies, ErrorOf] of [[REFUSAL_BODIES.limited, RateLimitedError], [REFUSAL_BODIES.penalized, PenalizedError]] as const) {
    for (const refused of decisions) {
      const error = new ErrorOf(refused)
      const body = bodies.of(refused, retryAfterSeconds(refused.retryAfterMs))
      const expected = await fastifyBody(error)
      t.equal(body.text, expected.body, error.message)
      t.equal(body.length, expected.length, 'its length')
      t.equal(bodies.statusCode, error.statusCode)
    }
  }
})

t.test('the last body with a Retry-After is kept; one without is built each time, and kept none', async (t) => {
  const bodies = new RefusalBodies(RATE_LIMITED)
  const first = bodies.of(decision(2000), 2)
  t.equal(bodies.of(decision(1500, 2), 2), first, 'the same seconds: the same body, whatever the decision')
  const never = bodies.of(decision(Infinity), undefined)
  t.match(never.text, /this quota does not refill/)
  t.match(bodies.of(decision(Infinity, 9), undefined).text, /costs more than the quota holds/, 'without: from the decision')
  t.equal(bodies.of(decision(2000), 2), first, 'still kept')
  const next = bodies.of(decision(3000), 3)
  t.not(next, first)
  t.match(next.text, /retry in 3 seconds/)
  t.equal(bodies.of(decision(3000), 3), next)
})

t.test('the kinds give the errors their codes, statuses and messages', async (t) => {
  const refused = decision(61_000)
  t.equal(new RateLimitedError(refused).message, RATE_LIMITED.message(refused, 61))
  t.equal(new PenalizedError(refused).message, PENALIZED.message(refused, 61))
  t.equal(new PenalizedError(refused).code, PENALIZED.code)
  t.equal(new RateLimitedError(refused).code, RATE_LIMITED.code)
})
