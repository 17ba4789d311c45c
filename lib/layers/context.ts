/**
 * What the layers run with: the plan (config/plan.ts) and what wire.ts built from
 * it — the stores, the key caches, the penalty counter, the shadow counter.
 */
import type { LimitDecision } from '../types/decision.js'
import type { Store } from '../types/store.js'
import type { FastifyRequest } from 'fastify'
import type { AppPlan, EdgePlan, Plan } from '../config/plan.js'
import type { Warnings } from '../output/warnings.js'
import type { ShadowCounter } from '../output/shadow-report.js'
import type { IdentityQuotas } from './identity-quota.js'
import type { Lookups } from './lookup.js'
import type { Group } from './registrations.js'
import type { Outcome } from './outcome.js'
import type { Penalties } from './penalty.js'
import type { Protection } from './protection.js'
import type { RouteTable } from './routes.js'

export interface EdgeSettings extends EdgePlan {
  /** A `key` value → its bucket key, `{key:<digest>}:edge` (HMAC-SHA256 with `keySecret`, else SHA-256); cached. */
  keyOfValue: (value: string) => string
  /** `request.ip` → its bucket key, `{ip:<address>}:edge` (IPv6 by `ipv6Subnet`); cached. */
  keyOfAddress: (ip: string) => string
  /** The store the edge decides with: the plugin's store, or under a local `edge.mode` one in front of it. */
  store: Store
}

export interface AppSettings extends AppPlan {
  /** Checks identities' quotas against `app.maxQuota`; `undefined` without it. */
  identityQuotas: IdentityQuotas | undefined
  /** A user id as store keys and logs hold it (its digest under `app.digestIds`; keys.ts `storedUserId`). */
  userId: (id: string) => string
}

export interface Settings extends Omit<Plan, 'store' | 'edge' | 'app'> {
  /** The plugin's store (the app layer's, and the edge's under `edge.mode: 'exact'`). */
  store: Store
  edge: EdgeSettings | undefined
  app: AppSettings | undefined
  /** What a refusal does: enforce it, or in shadow mode let it pass. */
  outcome: Outcome
  /** Counts refusals and starts penalties. */
  penalties: Penalties
  /** Counts would-be refusals for `fastify.tollgate.shadowReport()`; `undefined` unless `shadow`. */
  shadowCounter: ShadowCounter | undefined
  /** Awaits the promises user functions return, within `asyncTimeoutMs`. */
  lookups: Lookups
  /** The registrations of this app: with several, what each takes is noted, to give back on another's refusal. */
  group: Group
  /** Capacity protection (`protect`); `undefined` without it. */
  protection: Protection | undefined
  /** Where a request holds each layer's step that passed (`Decided`), by layer: this registration's own symbols. */
  decided: Readonly<Record<'edge' | 'app', symbol>>
}

/** What a layer's hooks are made with. */
export interface HookContext {
  settings: Settings
  routes: RouteTable
  warnings: Warnings
  /** request.ip is the connection's address (trustProxy off): keys of an address are kept per connection. */
  perConnection: boolean
  /** The allow-list's test (a promise when its predicate answers later); `undefined` without an allow-list. */
  allowed: ((request: FastifyRequest) => boolean | Promise<boolean>) | undefined
}

/** The store a layer decides with: the edge's own (`EdgeSettings.store`), else (the app layer, the manual calls, the limiters) the plugin's. */
export function storeOf (settings: Settings, layer: LimitDecision['layer']): Store {
  return layer === 'edge' && settings.edge !== undefined ? settings.edge.store : settings.store
}
