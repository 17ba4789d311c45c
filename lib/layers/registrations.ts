/**
 * Several registrations in one app (a per-second and a per-hour limiter, one at
 * the root and one in a plugin). Each is named apart (the `name` option; at most
 * one without a name) along a context and its parents, and found at
 * `fastify.tollgates.<name>` (the one without a name at `fastify.tollgate`). When
 * several limit one request, what each took is noted on the request, so that a
 * refusal by one gives back what the others took: an inner refusal spends no outer
 * bucket.
 */
import type { FastifyBaseLogger, FastifyInstance, FastifyRequest } from 'fastify'
import { InvalidOptionError } from '../output/errors.js'
import type { BucketRequest, Store } from '../types/store.js'
import { isThenable, thenSafely } from './promises.js'

/** The registrations of one app's tree of contexts. */
export interface Group {
  /** How many registrations joined it: takes are noted only when more than one did. */
  size: number
}

const UNNAMED = Symbol('fastify-tollgate: the registration without a name')
const GROUP = Symbol('fastify-tollgate: the group of registrations')

/** A context's registrations by name (its parents' inherited), and their group. */
type Registry = Record<string, unknown> & { [UNNAMED]?: unknown, [GROUP]: Group }

/**
 * Joins `fastify`'s group under `name` (`undefined`: the registration without a
 * name), after checking that no registration of this context or a parent has it;
 * `publish` then puts its API in place. Throws `TOLLGATE_INVALID_OPTION`.
 */
export function join (fastify: FastifyInstance, name: string | undefined): { group: Group, publish: (api: unknown) => void } {
  const own = Object.hasOwn(fastify, 'tollgates')
  const inherited = (fastify as unknown as { tollgates?: Registry }).tollgates
  const slot = name ?? UNNAMED
  if (inherited !== undefined && slot in inherited) {
    throw new InvalidOptionError(name === undefined
      ? 'Expected a `name` for this registration: one without a name already limits this context (or a parent), and two would share their header members, keys and metrics; give this one `name: \'…\'`'
      : `Expected \`name\` to be unique among the registrations of this context and its parents, got \`${JSON.stringify(name)}\` twice`)
  }
  let registry = inherited as Registry
  if (!own) {
    registry = Object.create(inherited ?? null) as Registry
    if (inherited === undefined) registry[GROUP] = { size: 0 }
    fastify.decorate('tollgates', registry as unknown as FastifyInstance['tollgates'])
  }
  const group = registry[GROUP]
  group.size++
  registry[slot] = undefined
  return {
    group,
    publish: (api) => {
      registry[slot] = api
      if (name === undefined) fastify.decorate('tollgate', api as FastifyInstance['tollgate'])
    }
  }
}

/** What one registration took for a request. */
interface Take {
  /** The registration (its settings object). */
  owner: object
  store: Store
  buckets: readonly BucketRequest[]
}

const TAKES = Symbol('fastify-tollgate: what the registrations took for this request')

/** Notes what `owner` took for `request` (with several registrations only). */
export function noteTake (request: FastifyRequest, take: Take): void {
  const holder = request as unknown as { [TAKES]?: Take[] }
  const takes = holder[TAKES]
  if (takes === undefined) holder[TAKES] = [take]
  else takes.push(take)
}

/** Gives back what registrations other than `owner` took for `request`, now that `owner` refused it. */
export function giveBackOthers (request: FastifyRequest, owner: object): void {
  const holder = request as unknown as { [TAKES]?: Take[] }
  const takes = holder[TAKES]
  if (takes === undefined) return
  holder[TAKES] = takes.filter((take) => take.owner === owner)
  for (const take of takes) {
    if (take.owner !== owner) for (const bucket of take.buckets) giveBack(take.store, bucket, request.log)
  }
}

/** Gives `bucket`'s cost back to its bucket in `store` (a store without `refund` keeps it spent); a failure is logged, never thrown. */
export function giveBack (store: Store, bucket: BucketRequest, log: FastifyBaseLogger): void {
  if (bucket.cost <= 0 || store.refund === undefined) return
  const failed = (error: unknown): void => { log.error({ err: error, key: bucket.key }, 'fastify-tollgate: giving back a token taken for a refused request failed') }
  try {
    const refunded = store.refund(bucket)
    if (isThenable(refunded)) thenSafely(refunded, () => {}, failed)
  } catch (error) {
    failed(error)
  }
}
