/**
 * A refusal answered from the plugin's own hook, without going through
 * Fastify's error path, when that path would answer it with Fastify's default
 * error handler and nothing else would see it: the response is the same, byte
 * for byte (output/refusal-reply.ts), at a fraction of the cost.
 *
 * It reads Fastify internals, found once at registration by their symbols'
 * descriptions (`fastifyInternals`); without them, every refusal takes
 * Fastify's error path. Whether a route context's refusals may be answered so is
 * decided at its first refusal (`answersItself`), and kept: a route's error
 * handler and hooks are fixed once the app is ready.
 */
import { tracingChannel } from 'node:diagnostics_channel'
import { setRefusalHeaders, writeRefusal, type Refusal } from '../output/refusal-reply.js'
import type { FastifyReply, FastifyRequest } from 'fastify'

/** The Fastify internals a prepared refusal reads. */
export interface FastifyInternals {
  /** `request[context]`: the request's route context (its error handler, its hooks, its schema). */
  readonly context: symbol
  /** `reply[headers]`: the reply's headers object, which Fastify hands to `writeHead`. */
  readonly headers: symbol
  /** `reply[trailers]`: the reply's trailers, `null` when none were declared. */
  readonly trailers: symbol
  /** Fastify's own error handler: the root of the chain every context's handler extends. */
  readonly defaultErrorHandler: object
}

/** What a route context holds that decides whether its refusals are answered here. */
interface RouteContext {
  errorHandler?: unknown
  onError?: unknown
  onSend?: unknown
  schema?: { response?: unknown } | undefined
}

/** Fastify's tracing of route handlers: a refusal in `preHandler` is published there as an error, so with subscribers it takes Fastify's path. */
const handlerTrace = tracingChannel('fastify.request.handler')

/** The symbol of `holder` or of its prototypes whose description is `description`. */
function symbolNamed (holder: object, description: string): symbol | undefined {
  for (let at: object | null = holder; at !== null; at = Object.getPrototypeOf(at) as object | null) {
    const found = Object.getOwnPropertySymbols(at).find((symbol) => symbol.description === description)
    if (found !== undefined) return found
  }
  return undefined
}

/** The last object of `handler`'s prototype chain before `Object.prototype`: the handler every other one extends. */
function rootOf (handler: object): object {
  let root = handler
  for (let above = Object.getPrototypeOf(root) as object | null; above !== null && above !== Object.prototype; above = Object.getPrototypeOf(above) as object | null) root = above
  return root
}

/**
 * The internals of the Fastify that made `fastify`, or `undefined` when one is
 * missing (another major version, another implementation). The reply's own
 * symbols are read from a reply made for the purpose (its constructor only sets fields).
 */
export function fastifyInternals (fastify: object): FastifyInternals | undefined {
  const errorHandler = symbolNamed(fastify, 'fastify.errorHandler')
  const replyClass = symbolNamed(fastify, 'fastify.Reply')
  if (errorHandler === undefined || replyClass === undefined) return undefined
  const fields = fastify as Record<symbol, object>
  let probe: object
  let defaultErrorHandler: object
  try {
    probe = Reflect.construct(fields[replyClass] as () => object, [{}, {}, undefined]) as object
    defaultErrorHandler = rootOf(fields[errorHandler] as object)
  } catch {
    return undefined
  }
  const context = symbolNamed(probe, 'fastify.context')
  const headers = symbolNamed(probe, 'fastify.reply.headers')
  const trailers = symbolNamed(probe, 'fastify.reply.trailers')
  if (context === undefined || headers === undefined || trailers === undefined) return undefined
  return { context, headers, trailers, defaultErrorHandler }
}

/**
 * Whether a route context's refusals are answered here: Fastify's default
 * error handler is in force, and no `onError` or `onSend` hook and no response
 * schema would see or shape the error's response.
 */
function answersItself (context: RouteContext, defaultErrorHandler: object): boolean {
  return context.errorHandler === defaultErrorHandler && context.onError === null && context.onSend === null &&
    context.schema?.response === undefined
}

/** The request of a refusal and its reply. */
interface Exchange {
  request: FastifyRequest
  reply: FastifyReply
}

/** Sets a refusal's headers, and sends its response from the hook when it may. */
export interface RefusalAnswerer {
  /** Sets `refusal`'s own headers on the reply; sends its response if it may, and says whether it did (else the refusal goes to Fastify). */
  answer (exchange: Exchange, refusal: Refusal): boolean
}

/** Without Fastify's internals: the headers through `reply.header` (as `setRefusalHeaders` sets them), and every refusal goes to Fastify. */
const UNPREPARED: RefusalAnswerer = {
  answer ({ reply }, { seconds }) {
    if (seconds !== undefined) reply.header('retry-after', seconds)
    reply.header('cache-control', 'no-store')
    return false
  }
}

/** The answerer for the app of `fastify`: prepared refusals, unless Fastify's internals are missing. */
export function refusalAnswerer (fastify: object): RefusalAnswerer {
  const internals = fastifyInternals(fastify)
  return internals === undefined ? UNPREPARED : new PreparedRefusals(internals)
}

/** Answers refusals from the hook where a route context lets it (`answer`). */
class PreparedRefusals implements RefusalAnswerer {
  /** By route context: whether its refusals are answered here. */
  private readonly contexts = new WeakMap<object, boolean>()

  constructor (private readonly internals: FastifyInternals) {}

  /**
   * Sets `refusal`'s headers, then sends its response if this request's refusal
   * may be answered here, and says whether it did. Never for a reply with
   * trailers, nor while Fastify's handler tracing has subscribers.
   */
  answer ({ request, reply }: Exchange, refusal: Refusal): boolean {
    const { internals } = this
    const context = (request as unknown as Record<symbol, RouteContext>)[internals.context] as RouteContext
    let answers = this.contexts.get(context)
    if (answers === undefined) {
      answers = answersItself(context, internals.defaultErrorHandler)
      this.contexts.set(context, answers)
    }
    const fields = reply as unknown as Record<symbol, unknown>
    const headers = fields[internals.headers] as Record<string, unknown>
    setRefusalHeaders(headers, refusal.seconds)
    if (!answers || fields[internals.trailers] !== null || handlerTrace.hasSubscribers) return false
    return writeRefusal(reply.raw, headers, refusal)
  }
}
