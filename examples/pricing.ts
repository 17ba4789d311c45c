/**
 * Quotas as a pricing page writes them. Each plan is several limits consumed
 * together (a burst per second, an hourly and a daily allowance): a request
 * passes only when every one can pay, and `Retry-After` waits for all of them.
 * A customer with a negotiated quota carries it in the token (`rateLimit`
 * claim), within the largest the operator allows; anything else in that claim
 * gets the free plan. `POST /export` adds a quota of its own: 1 a minute, 5 a day.
 * A user refused 10 times in quick succession is shut out for 2 minutes.
 */
import Fastify from 'fastify'
import tollgate, { memoryStore, per } from 'fastify-tollgate'
import { addDemoAuth, tokenLine } from './auth.js'
import type { Example } from './example.js'

export const example: Example = {
  about: 'Pricing plans: free 5/s, 100/h, 1 000/day; pro 20/s, 5 000/h, 50 000/day; a negotiated quota in the token (at most 10 000, 1 000/s); POST /export 1 a minute, 5 a day; 10 refusals in quick succession: shut out for 2 minutes.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      app: {
        tiers: {
          default: [{ name: 'second', ...per(5, 'second') }, { name: 'hour', ...per(100, 'hour') }, { name: 'day', ...per(1000, 'day') }],
          pro: [{ name: 'second', ...per(20, 'second') }, { name: 'hour', ...per(5000, 'hour') }, { name: 'day', ...per(50_000, 'day') }]
        },
        maxQuota: { capacity: 10_000, refillPerSecond: 1000 },
        quotaClaim: 'rateLimit',
        // 10 refusals faster than 10 a minute shut the user out for 2 minutes.
        penalty: { after: 10, withinSeconds: 60, seconds: 120 }
      }
    })
    await addDemoAuth(app)
    app.get('/', async () => ({ ok: true }))
    app.post('/export', {
      config: { rateLimit: { quota: { default: [{ name: 'exports-minute', ...per(1, 'minute') }, { name: 'exports-day', ...per(5, 'day') }] } } }
    }, async () => ({ exported: true }))
    return app
  },
  tryIt: (url) => `${tokenLine(url, 'FREE', 'user=alice')}
for i in $(seq 7); do curl -s -o /dev/null -w '%{http_code} ' -H "Authorization: Bearer $FREE" ${url}/; done; echo   # 200 ×5, then 429: the per-second limit
curl -si -H "Authorization: Bearer $FREE" ${url}/ | grep -i '^ratelimit'   # the three limits, each by its name

${tokenLine(url, 'ACME', 'user=acme&capacity=500&refill=50')}
curl -si -H "Authorization: Bearer $ACME" ${url}/ | grep -i '^ratelimit-policy'   # "app";q=500;w=10: the negotiated quota
${tokenLine(url, 'GREEDY', 'user=greedy&capacity=20000&refill=1')}
curl -si -H "Authorization: Bearer $GREEDY" ${url}/ | grep -i '^ratelimit-policy'   # the free plan: 20 000 is above the largest quota allowed (LOG=1 logs why)

for i in 1 2; do curl -s -o /dev/null -w '%{http_code} ' -X POST -H "Authorization: Bearer $ACME" ${url}/export; done; echo   # 200 429: one export a minute

${tokenLine(url, 'BOT', 'user=bot')}
for i in $(seq 15); do curl -s -o /dev/null -H "Authorization: Bearer $BOT" ${url}/; done; curl -si -H "Authorization: Bearer $BOT" ${url}/ | grep -i '^retry-after'   # retry-after: 120 (or just under): refused 10 times, shut out`
}
