/** FRL's test/route-rate-limit.test.js, 'With enable IETF draft spec': `headers: 'draft-03'` on a route's own edge bucket. */
import t from 'tap'
import { frlApp } from './frl.js'

t.test('FRL: With enable IETF draft spec', async (t) => {
  // Same: a route's own edge bucket, in FRL's three draft fields.
  const { app } = await frlApp({ headers: 'draft-03', edge: { global: false } })
  t.teardown(() => app.close())
  const config = { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 } }, someOtherPlugin: { someValue: 1 } }
  app.get('/', { config }, async () => 'hello!')
  const response = await app.inject('/')
  t.equal(response.statusCode, 200)
  t.equal(response.headers['ratelimit-limit'], '2')
  t.equal(response.headers['ratelimit-remaining'], '1')
  t.equal(response.headers['ratelimit-reset'], '1')
})
