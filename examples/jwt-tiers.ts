/**
 * The app layer with tiers from a JWT claim: each user (`sub`) has a bucket whose
 * size depends on the `tier` claim. A tier that is not configured gets `default`;
 * a request without a valid token gets `anonymous`, keyed by IP.
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import { addDemoAuth, tokenLine } from './auth.js'
import type { Example } from './example.js'

export const example: Example = {
  about: 'JWT tiers: default 10 at once then 1/s, pro 50 then 10/s, anonymous 3 per IP then 1 per 10 s.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      app: {
        tiers: {
          default: { capacity: 10, refillPerSecond: 1 },
          pro: { capacity: 50, refillPerSecond: 10 },
          anonymous: { capacity: 3, refillPerSecond: 0.1 }
        }
      }
    })
    await addDemoAuth(app)
    app.get('/', async (request) => ({ hello: request.user ?? 'anonymous' }))
    return app
  },
  tryIt: (url) => `${tokenLine(url, 'FREE', 'user=alice')}
${tokenLine(url, 'PRO', 'user=bob&tier=pro')}
for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code} ' -H "Authorization: Bearer $FREE" ${url}/; done; echo   # 200 … 429 …: 10, then 429
for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code} ' -H "Authorization: Bearer $PRO" ${url}/; done; echo    # 200 …: all pass
curl -i -H "Authorization: Bearer $PRO" ${url}/; echo   # 200, RateLimit-Policy "app";q=50;w=5 and what is left`
}
