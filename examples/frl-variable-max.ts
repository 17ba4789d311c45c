/**
 * @fastify/rate-limit's "variable `max`" example, translated. FRL keys by a
 * `service-key` header and computes `max` per key (3 a second for `pro`, else
 * 2). Here a limit that depends on who is asking is a tier: `app.identify`
 * names the caller and its tier, and `app.tiers` holds one policy per tier,
 * checked at startup (`identify` may return a promise, as FRL's `max` may).
 *
 * The app layer trusts what `identify` returns, so it names only keys it knows:
 * an unknown key is anonymous, keyed by client IP, and inventing keys buys no
 * fresh bucket. (FRL's example takes any header value as a key.)
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

/** Known service keys and their plans (a database or a cache in real life). */
export const SERVICE_KEYS = new Map([['key-pro-0001', 'pro'], ['key-basic-0002', 'default']])

export const example: Example = {
  about: 'A max per caller, as tiers: service keys on the pro plan get 3 at once, then 3/s; others 2, then 2/s; unknown keys count per IP.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      app: {
        tiers: {
          default: { capacity: 2, refillPerSecond: 2 }, // FRL: max 2 per timeWindow 1000 ms
          pro: { capacity: 3, refillPerSecond: 3 } // FRL: max 3 when the key is 'pro'
        },
        identify: (request) => {
          const key = request.headers['service-key']
          if (typeof key !== 'string') return undefined // no key: anonymous, keyed by client IP
          const tier = SERVICE_KEYS.get(key)
          return tier === undefined ? undefined : { id: key, tier }
        }
      }
    })
    app.get('/', async () => ({ hello: 'world' }))
    return app
  },
  tryIt: (url) => `for i in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code} ' -H 'service-key: key-pro-0001' ${url}/; done; echo     # 200 200 200 429: pro, 3 at once
for i in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' -H 'service-key: key-basic-0002' ${url}/; done; echo     # 200 200 429: default, 2 at once
for i in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' -H "service-key: made-up-$i" ${url}/; done; echo          # 200 200 429: unknown keys share their IP's bucket`
}
