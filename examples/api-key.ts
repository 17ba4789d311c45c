/**
 * An edge keyed by API key. The edge runs before authentication, so it only
 * trusts a key it knows: an unknown or missing key falls back to the client IP,
 * and a client inventing a new key per request stays in its IP's bucket.
 * Authentication (here a lookup) then refuses unknown keys with 401.
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

/** The known keys, and whose they are (a database or a cache in real life). */
export const API_KEYS = new Map([['key-acme-0001', 'acme'], ['key-globex-0002', 'globex']])

export const example: Example = {
  about: 'An edge keyed by known API keys (5 at once, then 1/s each); unknown keys share their IP\'s bucket.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      edge: {
        capacity: 5,
        refillPerSecond: 1,
        key: (request) => {
          const key = request.headers['x-api-key']
          return typeof key === 'string' && API_KEYS.has(key) ? key : undefined
        }
      }
    })
    app.addHook('onRequest', async (request, reply) => {
      const key = request.headers['x-api-key']
      if (typeof key !== 'string' || !API_KEYS.has(key)) return reply.code(401).send({ error: 'unknown API key' })
    })
    app.get('/', async (request) => ({ customer: API_KEYS.get(request.headers['x-api-key'] as string) }))
    return app
  },
  tryIt: (url) => `for i in $(seq 7); do curl -s -o /dev/null -w '%{http_code} ' -H 'x-api-key: key-acme-0001' ${url}/; done; echo     # 5 then 429
curl -s -o /dev/null -w '%{http_code}\\n' -H 'x-api-key: key-globex-0002' ${url}/                                      # another key: 200
for i in $(seq 7); do curl -s -o /dev/null -w '%{http_code} ' -H "x-api-key: made-up-$i" ${url}/; done; echo            # 401 x5, then 429: one IP bucket`
}
