/**
 * A custom error body: refusals as RFC 9457 problem details
 * (`application/problem+json`), through Fastify's `setErrorHandler`. The
 * plugin sets `Retry-After` and the RateLimit headers before the error reaches
 * the handler, so they are kept.
 */
import Fastify, { type FastifyError } from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

const TOLLGATE_CODES = new Set(['TOLLGATE_RATE_LIMITED', 'TOLLGATE_PENALIZED', 'TOLLGATE_STORE_UNAVAILABLE'])

export const example: Example = {
  about: 'Refusals as RFC 9457 problem+json, through setErrorHandler (edge: 3 at once, then 1/s).',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, { store: memoryStore({ clock }), edge: { capacity: 3, refillPerSecond: 1 } })
    app.setErrorHandler((error: FastifyError, request, reply) => {
      if (error.code === undefined || !TOLLGATE_CODES.has(error.code)) return reply.send(error)
      const retryAfter = reply.getHeader('retry-after')
      return reply.code(error.statusCode ?? 429).type('application/problem+json').send({
        type: 'about:blank',
        title: error.statusCode === 503 ? 'Service Unavailable' : 'Too Many Requests',
        status: error.statusCode,
        detail: error.message,
        instance: request.url,
        ...(retryAfter === undefined ? {} : { retryAfterSeconds: Number(retryAfter) })
      })
    })
    app.get('/', async () => ({ hello: 'world' }))
    return app
  },
  tryIt: (url) => `for i in 1 2 3; do curl -s -o /dev/null ${url}/; done
curl -i ${url}/   # 429, content-type application/problem+json, Retry-After: 1`
}
