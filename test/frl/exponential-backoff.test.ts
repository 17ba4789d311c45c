/**
 * FRL's test/exponential-backoff.test.js. Differs by design: there is no
 * `exponentialBackoff` (the option fails startup); a refusal changes nothing
 * here, so every refusal waits for the same token. The nearest is `penalty`, a
 * fixed time.
 */
import t from 'tap'
import Fastify from 'fastify'
import tollgate from '../../lib/index.js'
import { failure, readyWith } from '../helpers.js'
import { frlApp, tooMany, trio } from './frl.js'

/** FRL's `{ max: 2, timeWindow: 500 }`: 2 at once, then 2 per 500 ms. */
const TWO_PER_HALF_SECOND = { capacity: 2, refillPerSecond: 4 }

t.test('FRL: Exponential Backoff', async (t) => {
  const option = await failure(() => readyWith({ edge: { global: false } }, (app) => {
    app.get('/', { config: { rateLimit: { edge: TWO_PER_HALF_SECOND, exponentialBackoff: true } as never } }, async () => 'x')
  }))
  t.equal(option.code, 'TOLLGATE_INVALID_ROUTE_CONFIG')
  t.match(option.message, 'Unknown option `rateLimit.exponentialBackoff`')
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/expoential-backoff', { config: { rateLimit: { edge: TWO_PER_HALF_SECOND } } }, async () => 'exponential backoff applied!')
  const get = async () => app.inject({ url: '/expoential-backoff', method: 'GET' })
  t.match(trio(await get()), { status: 200, limit: '2', remaining: '1' })
  t.match(trio(await get()), { status: 200, limit: '2', remaining: '0' })
  for (let i = 0; i < 2; i++) {
    const refused = await get()
    t.match(trio(refused), { status: 429, limit: '2', remaining: '0', retryAfter: '1' })
    t.strictSame(refused.json(), tooMany(1))
  }
  clock.advance(1000)
  t.match(trio(await get()), { status: 200, limit: '2', remaining: '1' })
})

t.test('FRL: Global Exponential Backoff', async (t) => {
  // FRL: refusals wait 1, 1, 2, 4 s; here each waits for the next token: 1 s (rounded up from 0.25 s).
  const option = await failure(async () => { await Fastify().register(tollgate, { edge: TWO_PER_HALF_SECOND, exponentialBackoff: true } as never) })
  t.equal(option.code, 'TOLLGATE_INVALID_OPTION')
  t.match(option.message, 'Unknown option `options.exponentialBackoff`')
  const { app } = await frlApp({ edge: TWO_PER_HALF_SECOND })
  t.teardown(() => app.close())
  app.get('/expoential-backoff-global', { config: { rateLimit: { edge: TWO_PER_HALF_SECOND } } }, async () => 'exponential backoff applied!')
  const get = async () => app.inject({ url: '/expoential-backoff-global', method: 'GET' })
  t.match(trio(await get()), { status: 200, limit: '2', remaining: '1' })
  t.match(trio(await get()), { status: 200, limit: '2', remaining: '0' })
  const messages = []
  for (let i = 0; i < 4; i++) {
    const refused = await get()
    t.match(trio(refused), { status: 429, limit: '2' })
    messages.push(refused.json().message)
  }
  t.strictSame(messages, Array(4).fill('Rate limit exceeded, retry in 1 second'), 'no doubling')
})

t.test('FRL: MAx safe Exponential Backoff', async (t) => {
  // Differs by design: a bucket must refill within 1e10 s (about 317 years), so FRL's
  // 285421-year window fails startup; a limit that never comes back is `refillPerSecond: 0`,
  // whose refusals carry no Retry-After (no number would be true).
  const years = await failure(() => readyWith({ edge: { global: false } }, (app) => {
    app.get('/', { config: { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 / (285_421 * 365 * 86_400) } } } }, async () => 'x')
  }))
  t.equal(years.code, 'TOLLGATE_INVALID_ROUTE_CONFIG')
  t.match(years.message, 'to fill the bucket of 2 tokens within 1e10 seconds (about 317 years)')
  const { app } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/expoential-backoff-global', { config: { rateLimit: { edge: { capacity: 2, refillPerSecond: 0 } } } }, async () => 'exponential backoff applied!')
  const get = async () => app.inject({ url: '/expoential-backoff-global', method: 'GET' })
  t.strictSame(trio(await get()), { status: 200, limit: '2', remaining: '1' })
  t.strictSame(trio(await get()), { status: 200, limit: '2', remaining: '0' })
  for (let i = 0; i < 4; i++) {
    const refused = await get()
    t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0' })
    t.strictSame(refused.json(), { statusCode: 429, code: 'TOLLGATE_RATE_LIMITED', error: 'Too Many Requests', message: 'Rate limit exceeded: this quota does not refill' })
  }
})
