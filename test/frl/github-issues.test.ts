/** FRL's test/github-issues/*.test.js (issues 207, 215 and 284 of fastify-rate-limit). */
import t from 'tap'
import { frlApp, trio } from './frl.js'

/** FRL's route `{ max: 1, timeWindow: 5000 }`: one at once, then one every 5 s. */
const ONE_PER_5S = { rateLimit: { edge: { capacity: 1, refillPerSecond: 1 / 5 } } }

t.test('FRL: issue #207 - when continueExceeding is true and the store is local then it should reset the rate-limit', async (t) => {
  // Differs by design: no `continueExceeding`. FRL restarts the window on every refusal
  // (refused at 3 s and 6 s, admitted at 11 s); here refusals cost nothing: the wait runs
  // from the last admitted request, and at 6 s (5 s after it) the client passes.
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/', { config: ONE_PER_5S }, async () => 'hello!')
  t.equal((await app.inject('/')).statusCode, 200)
  t.strictSame(trio(await app.inject('/')), { status: 429, limit: '1', remaining: '0', reset: '5', retryAfter: '5' })
  clock.advance(3000)
  t.strictSame(trio(await app.inject('/')), { status: 429, limit: '1', remaining: '0', reset: '2', retryAfter: '2' }, 'the wait was not pushed back')
  clock.advance(3000)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '1', remaining: '0', reset: '5' })
  clock.advance(5000)
  t.equal((await app.inject('/')).statusCode, 200)
})

t.test('FRL: issue #215 - when using local store, 2nd user should not be rate limited when the time window is passed for the 1st user', async (t) => {
  // Same: each client's bucket refills on its own time.
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/', { config: ONE_PER_5S }, async () => 'hello!')
  const from = async (remoteAddress: string): Promise<number> => (await app.inject({ url: '/', method: 'GET', remoteAddress })).statusCode
  t.equal(await from('1.1.1.1'), 200)
  clock.advance(3000)
  t.equal(await from('2.2.2.2'), 200)
  t.equal(await from('2.2.2.2'), 429)
  clock.advance(3000)
  t.equal(await from('2.2.2.2'), 429, '3 s after its first request')
  clock.advance(2100)
  t.equal(await from('2.2.2.2'), 200, '5.1 s after it')
})

t.test("FRL: issue #284 - don't set the reply code automatically", async (t) => {
  // Same: a refusal is thrown; the reply's status is still 200 in the error handler, and
  // the headers are already on the reply, kept by the redirect. (FRL's route also set
  // `continueExceeding`, which has no counterpart and changes nothing in this case.)
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  const seen: Array<[number, number | undefined]> = []
  app.setErrorHandler((error: { statusCode?: number }, _request, reply) => {
    seen.push([reply.statusCode, error.statusCode])
    return reply.redirect('/')
  })
  app.get('/', { config: ONE_PER_5S }, async () => 'hello!')
  t.equal((await app.inject('/')).statusCode, 200)
  const redirected = await app.inject('/')
  t.strictSame(trio(redirected), { status: 302, limit: '1', remaining: '0', reset: '5', retryAfter: '5' })
  t.strictSame(seen, [[200, 429]])
  clock.advance(5000)
  t.equal((await app.inject('/')).statusCode, 200)
})
