/**
 * A shared quota without Redis: N replicas, each on its own memory store, each
 * enforcing 1/N of the quota (`memoryStore({ replicas })`). The total stays near
 * the quota when a load balancer spreads clients evenly; it is the simple choice
 * when N is fixed and a little unfairness is fine. (Redis makes it exact.)
 *
 *   REPLICAS=3 npm run example replica-share
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

export const example: Example = {
  about: 'A per-replica share without Redis: a quota of 30 at once, then 15/s, split over REPLICAS (default 3) processes.',
  async build ({ clock, logger = false, env = process.env } = {}) {
    const app = Fastify({ logger })
    const replicas = Number(env.REPLICAS ?? 3)
    await app.register(tollgate, {
      store: memoryStore({ clock, replicas }),
      edge: { capacity: 30, refillPerSecond: 15 } // the quota of the whole service
    })
    app.get('/', async () => ({ hello: 'world', replicas }))
    return app
  },
  tryIt: (url) => `curl -i ${url}/; echo                                                  # 200, RateLimit-Policy shows this replica's share: q=10
for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # 200 … 429 …: the other 9 of the 10 (30 / 3) at once, about 5/s more, then 429`
}
