/**
 * Who a request is from, as the app layer sees it: a user with a valid id under
 * their tier, or an anonymous client keyed by its address. Never a better tier or
 * quota than the claims prove.
 */
import type { FastifyRequest } from 'fastify'
import type { Identity, Quota } from '../types/options.js'
import type { Warnings } from '../output/warnings.js'
import type { AppSettings } from './context.js'
import type { IdentityQuota, IdentityQuotas } from './identity-quota.js'

/** Who a request is from, as keys see it. */
export interface Requester {
  kind: 'user' | 'ip'
  /** The user id (`''` for kind `ip`: the keys read the client address from the request). */
  id: string
  tier: string
  /** The identity's own quota, checked; `undefined`: the tier's. */
  quota: IdentityQuota | undefined
}

/**
 * The default `identify`: the verified `request.user` of @fastify/jwt (`null` until
 * verified), with its quota from claim `quotaClaim` when set.
 */
function jwtIdentity (request: FastifyRequest, quotaClaim: string | undefined): Identity | undefined {
  const user: unknown = (request as { user?: unknown }).user
  if (typeof user !== 'object' || user === null) return undefined
  const { sub, tier } = user as { sub?: unknown, tier?: unknown }
  const identity: Identity = { id: sub as Identity['id'], tier: tier as string }
  if (quotaClaim !== undefined && Object.hasOwn(user, quotaClaim)) identity.quota = (user as Record<string, Quota>)[quotaClaim]
  return identity
}

/**
 * What `app.identify` (or the default, `request.user`) says of `request`: an
 * identity now, or a promise of one. A throw is logged and means anonymous.
 */
export function identityOf (request: FastifyRequest, app: AppSettings): unknown {
  try {
    return app.identify === undefined ? jwtIdentity(request, app.quotaClaim) : app.identify(request)
  } catch (error) {
    request.log.error({ err: error }, 'fastify-tollgate: app.identify threw; treated as anonymous')
    return undefined
  }
}

/**
 * The requester of `identity` (what `identityOf` gave, settled): a user with a
 * valid id, under their tier when it is an own name of `app.tiers` (else
 * `default`); otherwise anonymous, keyed by client IP under the anonymous tier.
 * Never a better tier or quota than the claims prove.
 */
export function requester (request: FastifyRequest, identity: unknown, app: AppSettings, warnings: Warnings): Requester {
  if (typeof identity === 'object' && identity !== null) {
    let id: unknown, tier: unknown, quota: unknown
    try {
      ({ id, tier, quota } = identity as Identity)
    } catch (error) {
      request.log.error({ err: error }, 'fastify-tollgate: reading the identity threw; treated as anonymous')
      return { kind: 'ip', id: '', tier: app.anonymousTier, quota: undefined }
    }
    const validId = (typeof id === 'string' && id !== '') || (typeof id === 'number' && Number.isFinite(id))
    if (validId) {
      const tierName = typeof tier === 'string' && Object.hasOwn(app.tiers, tier) ? tier : 'default'
      let own: IdentityQuota | string | undefined
      if (quota !== undefined && quota !== null) {
        if (app.identityQuotas === undefined) warnings.warn('TOLLGATE_IDENTITY_QUOTA_IGNORED')
        else own = app.identityQuotas.of(quota)
      }
      // Never a better quota than the claims prove: a bad one gets the tier's.
      if (typeof own === 'string') {
        (app.identityQuotas as IdentityQuotas).refused(request, String(id), own)
        own = undefined
      }
      return { kind: 'user', id: String(id), tier: tierName, quota: own }
    }
  }
  return { kind: 'ip', id: '', tier: app.anonymousTier, quota: undefined }
}
