/** FRL's test/local-store-close.test.js. */
import t from 'tap'
import { frlApp } from './frl.js'

t.test('FRL: Fastify close on local store', async (t) => {
  // Same: closing the app closes the memory store (its buckets dropped, its sweep timer
  // stopped) and runs the app's other onClose hooks.
  const { app, store } = await frlApp({ edge: { capacity: 2, refillPerSecond: 2 } })
  let counter = 1
  app.addHook('onClose', (_instance, done) => { counter++; done() })
  app.get('/', async () => 'hello')
  t.equal((await app.inject('/')).statusCode, 200)
  t.equal(store.size, 1)
  await app.close()
  t.equal(counter, 2)
  t.equal(store.size, 0, 'the store was closed')
})
