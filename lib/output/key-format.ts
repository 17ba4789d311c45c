/**
 * Every key the plugin writes to a store, in one place. Keys are a public
 * contract: replicas of two versions share buckets during a rolling deploy, so
 * a change here needs a versioned prefix (test/output/golden-keys.test.ts holds them).
 *
 * A key reads `{<kind>:<identity>}:<bucket>`, e.g. `{ip:203.0.113.7}:edge`,
 * `{user:42}:app`, `{user:42}:route:POST /export`. Every bucket of one identity
 * shares the `{…}` hash tag (one Redis Cluster slot), and the kinds keep key
 * spaces apart: a user whose id is an IP string never shares an anonymous bucket.
 * A bucket's key may carry suffixes after it: a limit's name (`:hour`, a route
 * quota's `#hour`), an identity's own quota (`~q500r50`), a penalty (`~penalty`).
 */
import { createHash, createHmac, type Hash, type Hmac } from 'node:crypto'
import type { BucketPolicy } from '../types/engine.js'

/** Longest identity kept verbatim; longer ones are hashed. */
const MAX_IDENTITY_LENGTH = 100
/** Identities made only of these characters are kept verbatim; others are hashed. */
const SAFE_IDENTITY = /^[\w.:@/+=-]+$/
/** A surrogate that pairs with none (in `u` mode a pair is one code point): the string is not well-formed. */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u

/**
 * An identity safe to put in a key: kept as it is when short and plain, else
 * `~` and a SHA-256 digest (`~` is not a plain character, so a hashed identity
 * never equals a verbatim one). It can never contain `{`, `}` or a newline.
 * An ill-formed string (a lone surrogate) is hashed apart: see `illFormed`.
 */
export function boundIdentity (identity: string): string {
  if (identity.length <= MAX_IDENTITY_LENGTH && SAFE_IDENTITY.test(identity)) return identity
  if (LONE_SURROGATE.test(identity)) return '~' + illFormed(createHash('sha256'), identity)
  return '~' + createHash('sha256').update(identity).digest('base64url')
}

/**
 * Hides `edge.key` values (API keys) and a limiter's key values before they become part of a store key or
 * a log line: HMAC-SHA256 with `secret`, else plain SHA-256 (base64url, 43 characters).
 * An ill-formed value (a lone surrogate) is hashed apart: see `illFormed`.
 */
export function keyDigest (secret: string | undefined): (value: string) => string {
  return (value) => {
    const hash = secret === undefined ? createHash('sha256') : createHmac('sha256', secret)
    return LONE_SURROGATE.test(value) ? illFormed(hash, value) : hash.update(value).digest('base64url')
  }
}

/**
 * The digest of an ill-formed string (one with a lone surrogate), which UTF-8
 * cannot encode: hashing its UTF-8 bytes would take `'a\uD800'` as `'a\uFFFD'`,
 * two identities in one bucket. Its UTF-16 code units are hashed instead, tagged
 * `u16.` (47 characters), which no digest of a well-formed string reads like:
 * base64url has no `.`. So `keyDigest` gives `u16.…` and `boundIdentity` `~u16.…`.
 */
function illFormed (hash: Hash | Hmac, value: string): string {
  return 'u16.' + hash.update(Buffer.from(value, 'utf16le')).digest('base64url')
}

/**
 * A bucket's name in registration `registration` (`fastify-tollgate`'s `name`
 * option): `hourly.edge`, or `edge` as it is for the registration without a name.
 * The same name serves a bucket's store key and its header member, so that
 * registrations sharing a store or a reply never collide (no name holds a `.`).
 */
export const inRegistration = (registration: string | undefined, bucket: string): string => registration === undefined ? bucket : `${registration}.${bucket}`

/** The key of bucket `bucket` for identity `identity` of kind `kind` (`ip`, `key`, `user`…). */
export function bucketKey (kind: string, identity: string, bucket: string): string {
  return `{${kind}:${boundIdentity(identity)}}:${bucket}`
}

/** A key of one's own (`fastify.tollgate` with a key and a policy): apart from every key a layer uses. */
export const manualKey = (key: string, registration: string | undefined): string => bucketKey('manual', key, inRegistration(registration, 'manual'))

/**
 * A limiter's bucket (`fastify.tollgate.limiter`), named after the limiter:
 * `{lim:<digest>}:limiter:otp` for a value of its key function (digested as
 * `edge.key` values are), `{ip:<address>}:limiter:otp` for the client address.
 */
export const limiterKey = (kind: 'lim' | 'ip', identity: string, name: string, registration: string | undefined): string => bucketKey(kind, identity, inRegistration(registration, `limiter:${name}`))

/**
 * The suffix of a limit of a list, after the layer's key: `:<name>` for a tier's
 * limit, `#<name>` for a route quota's (no route's name holds a `#`). A quota of
 * one policy has none (`''`).
 */
export const limitSuffix = (separator: ':' | '#', name: string): string => `${separator}${name}`

/**
 * The suffix of an identity's own quota: the limit's suffix and its policy as
 * configured, `~q500r50` (`:<name>~q…r…` in a list), so that a user under another
 * policy has other buckets and the same policy finds the same bucket again.
 */
export const identityQuotaSuffix = (suffix: string, whole: BucketPolicy): string => `${suffix}~q${whole.capacity}r${whole.refillPerSecond}`

/** A route's own edge bucket for the client keyed `clientKey` (the same hash tag): `{ip:…}:edge-route:POST /login`. */
export const edgeRouteKey = (clientKey: string, routeBucket: string): string => `${clientKey}-${routeBucket}`

/**
 * A penalty's bucket for the client keyed `clientKey`: `…~penalty`, or for a
 * route's own penalty `…~penalty:route:POST /login` (`~`: no limit name holds
 * one, so no limit's key is a penalty's).
 */
export const penaltyKey = (clientKey: string, routeBucket?: string): string => routeBucket === undefined ? `${clientKey}~penalty` : `${clientKey}~penalty:${routeBucket}`

/** The Redis store's heartbeat: a sorted set of live replicas (after the store's prefix), hash-tagged like every key. */
export const REPLICAS_KEY = '{replicas}'
