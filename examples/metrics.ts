/**
 * Prometheus metrics (`fastify-tollgate/metrics`, with prom-client installed): the
 * demo API of `npm start`, and `GET /metrics` with the limiter's decisions by
 * layer, tier, route and outcome, the store's latency, and the Redis store's
 * health. The metrics live in a registry of their own here; with prom-client's
 * global `register`, call `tollgateMetrics()` without options.
 */
import { memoryStore } from 'fastify-tollgate'
import { tollgateMetrics } from 'fastify-tollgate/metrics'
import { Registry } from 'prom-client'
import type { Example } from './example.js'
import { buildServer } from './server.js'

export const example: Example = {
  about: 'Prometheus metrics: the demo API, and GET /metrics with every decision counted by layer, tier, route and outcome.',
  async build ({ clock, logger = false } = {}) {
    const app = await buildServer({ store: memoryStore({ clock }), logger })
    const registry = new Registry()
    const metrics = tollgateMetrics({ registry })
    app.addHook('onClose', async () => { metrics.close() })
    app.get('/metrics', { config: { rateLimit: false } }, async (_request, reply) => {
      return reply.type(registry.contentType).send(await registry.metrics())
    })
    return app
  },
  tryIt: (url) => `for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # 200 … 429 …: no token: 10 per IP
curl -s ${url}/metrics; echo   # 200: tollgate_decisions_total{layer="app",tier="anonymous",route="GET /",outcome="refused"} 2, and the rest`
}
