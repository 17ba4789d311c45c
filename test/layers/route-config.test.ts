import t from 'tap'
import Fastify, { type FastifyRequest } from 'fastify'
import { routeConfigReader } from '../../lib/layers/route-config.js'

t.test('routeConfigReader: the route config of each request, the same object routeOptions gives', async (t) => {
  const app = Fastify()
  const configOf = routeConfigReader()
  const seen: Array<[unknown, unknown]> = []
  app.addHook('onRequest', async (request) => { seen.push([configOf(request), request.routeOptions.config]) })
  app.get('/a', { config: { rateLimit: false } }, async () => 'a')
  app.get('/b', async () => 'b')
  for (const url of ['/a', '/b', '/a', '/missing']) await app.inject(url)
  t.equal(seen.length, 4)
  for (const [read, config] of seen) t.equal(read, config, 'the very same object')
  t.equal((seen[0]?.[0] as { rateLimit?: unknown }).rateLimit, false)
  await app.close()
})

t.test('routeConfigReader: the public getter when Fastify keeps the context elsewhere', async (t) => {
  const config = { rateLimit: false }
  const context = Symbol('fastify.context')
  const cases: Array<[string, () => FastifyRequest]> = [
    ['no context symbol', () => ({ routeOptions: { config } }) as unknown as FastifyRequest],
    ['a context with another config', () => ({ [context]: { config: {} }, routeOptions: { config } }) as unknown as FastifyRequest],
    ['a context that is not an object', () => ({ [context]: null, routeOptions: { config } }) as unknown as FastifyRequest]
  ]
  for (const [name, request] of cases) {
    const configOf = routeConfigReader()
    t.equal(configOf(request()), config, name)
    t.equal(configOf(request()), config, `${name}, again`)
  }
})
