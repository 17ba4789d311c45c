/**
 * A refusal's response written straight to the connection, byte for byte as
 * Fastify's default error handler writes it for the refusal's error
 * (`RateLimitedError`, `PenalizedError`): its status, the reply's headers in
 * their order with `content-type` and `content-length` last, and the body of
 * Fastify's error serializer (`statusCode`, `code`, `error`, `message`, in that
 * order). layers/prepared.ts says when it may be used.
 */
import { STATUS_CODES, type OutgoingHttpHeaders, type ServerResponse } from 'node:http'
import { Http2ServerResponse } from 'node:http2'
import type { LimitDecision } from '../types/decision.js'
import { PENALIZED, RATE_LIMITED, type RefusalKind } from './errors.js'

/** A refusal to answer: the bodies of its kind, the decision behind it, and its `Retry-After` (`undefined`: none). */
export interface Refusal {
  readonly bodies: RefusalBodies
  readonly decision: LimitDecision
  readonly seconds: number | undefined
}

/** A body and its length as `content-length` holds it. */
interface Body {
  readonly text: string
  readonly length: string
}

/** The content type Fastify gives an error's body. */
export const ERROR_CONTENT_TYPE = 'application/json; charset=utf-8'

/**
 * The bodies of one kind of refusal. The last one with a `Retry-After` is kept
 * (a flood repeats it, and so did a retry message build a new string for each
 * request); one without is built each time (its message depends on the decision).
 */
export class RefusalBodies {
  readonly statusCode: number
  /** `{"statusCode":429,"code":"…","error":"Too Many Requests","message":`. */
  private readonly opening: string
  private lastSeconds = 0
  private last: Body = { text: '', length: '' }

  constructor (private readonly kind: RefusalKind) {
    const { statusCode, code } = kind
    this.statusCode = statusCode
    this.opening = `{"statusCode":${statusCode},"code":${JSON.stringify(code)},"error":${JSON.stringify(STATUS_CODES[statusCode])},"message":`
  }

  of (decision: LimitDecision, seconds: number | undefined): Body {
    if (seconds !== undefined && seconds === this.lastSeconds) return this.last
    const text = `${this.opening}${JSON.stringify(this.kind.message(decision, seconds))}}`
    const body = { text, length: String(Buffer.byteLength(text)) }
    if (seconds !== undefined) {
      this.lastSeconds = seconds
      this.last = body
    }
    return body
  }
}

/**
 * Sets a refusal's own headers in `headers`, the reply's headers object
 * (Fastify's), as `reply.header` would: `retry-after` when the refusal has one,
 * and `cache-control: no-store` (RFC 6585: a 429 must not be stored by a cache).
 * layers/prepared.ts sets them through `reply.header` when it cannot reach the object.
 */
export function setRefusalHeaders (headers: Record<string, unknown>, seconds: number | undefined): void {
  if (seconds !== undefined) headers['retry-after'] = seconds
  headers['cache-control'] = 'no-store'
}

/**
 * Ends `raw` with the refusal's response, its own headers already in `headers`
 * (`setRefusalHeaders`): `content-type` and `content-length` last (one set
 * earlier is replaced there, as Fastify's error handler does), then the body.
 * `headers`: the reply's own headers object (Fastify's), in the order they were set.
 * Says whether it wrote; when Node refuses the response, nothing is written.
 */
export function writeRefusal (raw: ServerResponse, headers: Record<string, unknown>, refusal: Refusal): boolean {
  const body = refusal.bodies.of(refusal.decision, refusal.seconds)
  if (headers['content-type'] !== undefined) delete headers['content-type']
  if (headers['content-length'] !== undefined) delete headers['content-length']
  headers['content-type'] = ERROR_CONTENT_TYPE
  headers['content-length'] = body.length
  const { statusCode } = raw
  // HTTP/2 has no status message (reading it warns): only HTTP/1's is kept, for a writeHead that throws after setting it.
  const statusMessage = raw instanceof Http2ServerResponse ? undefined : raw.statusMessage
  try {
    raw.writeHead(refusal.bodies.statusCode, headers as OutgoingHttpHeaders)
  } catch {
    // Node refused: the response was sent already (a timeout answered it while the
    // decision was on its way), or a header set earlier is invalid. Nothing was
    // written; Fastify's path answers (or ignores) the refusal as it did before.
    raw.statusCode = statusCode
    if (statusMessage !== undefined) raw.statusMessage = statusMessage
    return false
  }
  raw.end(body.text)
  return true
}

/** The bodies of a 429 and of a 403 in a penalty. */
export const REFUSAL_BODIES = { limited: new RefusalBodies(RATE_LIMITED), penalized: new RefusalBodies(PENALIZED) }
