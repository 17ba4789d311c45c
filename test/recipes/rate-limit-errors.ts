import type { FastifyInstance } from 'fastify'
import { OverloadedError, PenalizedError, RateLimitedError } from 'fastify-tollgate'

// Refusals and sheds as { error, message, retryAfterSeconds, layer }, logged at debug
// (Fastify's default handler logs each 4xx at info, and a shed's 503 at error); any
// other error goes on to Fastify's handler.
export function rateLimitErrors (app: FastifyInstance): void {
  app.setErrorHandler((error, request, reply) => {
    if (!(error instanceof RateLimitedError) && !(error instanceof OverloadedError)) return reply.send(error)
    request.log.debug({ rateLimit: error.decision }, 'rate limited')
    // 429, 403 for a penalty with status 403 (a PenalizedError is a RateLimitedError),
    // 503 (or 429) for a request capacity protection shed.
    return reply.code(error.statusCode ?? 429).send({
      error: error instanceof OverloadedError ? 'overloaded' : error instanceof PenalizedError ? 'penalized' : 'rate_limited',
      message: error.message,
      retryAfterSeconds: error.retryAfterSeconds ?? null, // null: this quota never refills
      layer: error.decision.layer
    })
  })
}
