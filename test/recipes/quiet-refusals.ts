import { LogController, type FastifyReply, type FastifyRequest } from 'fastify'
import { OverloadedError, RateLimitedError } from 'fastify-tollgate'

// On a Fastify 5 that exports LogController (5.12 does): refusals and sheds logged at debug, other errors as before.
// Fastify({ logger: true, logController: new QuietRefusals() })
export class QuietRefusals extends LogController {
  override defaultErrorLog (error: Error, request: FastifyRequest, reply: FastifyReply, metadata?: Record<string, unknown>): void {
    if (error instanceof RateLimitedError || error instanceof OverloadedError) request.log.debug({ err: error }, error.message)
    else super.defaultErrorLog(error, request, reply, metadata)
  }
}
