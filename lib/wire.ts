/**
 * The plan (config/) → the runtime the layers run with: the store (the memory
 * store by default), the edge's own store under a local `edge.mode`, the key
 * caches, identities' quota checks, the penalty counter, the shadow counter and
 * capacity protection.
 * Called once every option has passed validation; `close()` releases all it made.
 */
import { performance } from 'node:perf_hooks'
import type { FastifyBaseLogger } from 'fastify'
import type { Store } from './types/store.js'
import type { AppPlan, EdgePlan, Plan } from './config/plan.js'
import { ShadowCounter } from './output/shadow-report.js'
import { MemoryStore } from './stores/memory.js'
import { ReplicaShareEdge } from './stores/replica-share.js'
import { SettlingEdge } from './stores/settling/index.js'
import type { AppSettings, EdgeSettings, Settings } from './layers/context.js'
import { IdentityQuotas } from './layers/identity-quota.js'
import { edgeKeys, storedUserId } from './layers/keys.js'
import { Lookups } from './layers/lookup.js'
import type { Group } from './layers/registrations.js'
import { outcomeOf } from './layers/outcome.js'
import type { RefusalAnswerer } from './layers/prepared.js'
import { Penalties } from './layers/penalty.js'
import { Signals } from './layers/protect-signals.js'
import { Protection } from './layers/protection.js'

/** The runtime, and how to release it. */
export interface Wired {
  settings: Settings
  /** Closes what `wire` made and the stores, the edge's own first (it settles with the shared one). */
  close: () => Promise<void>
}

/** What the runtime is wired into: the app's logger (the stores log through it), its registrations, and how its refusals may be answered. */
export interface WireContext {
  log: FastifyBaseLogger
  group: Group
  refusals: RefusalAnswerer
}

/** Builds the runtime of `plan` in the app of `context`. */
export function wire (plan: Plan, { log, group, refusals }: WireContext): Wired {
  const store: Store = plan.store ?? new MemoryStore()
  const clock = store.localClock ?? ((): number => performance.now())
  store.useLogger?.(log)
  const edge = plan.edge === undefined ? undefined : wireEdge(plan.edge, store, clock, plan.name)
  if (edge !== undefined && edge.store !== store) edge.store.useLogger?.(log)
  const app = plan.app === undefined ? undefined : wireApp(plan.app, plan)
  const penalties = new Penalties(store, () => log, store.localClock)
  const shadowCounter = plan.shadow ? new ShadowCounter(plan.shadowReport.minutes, plan.shadowReport.keys, clock) : undefined
  const lookups = new Lookups(plan.asyncTimeoutMs, log, clock)
  const decided = { edge: Symbol('fastify-tollgate: edge decision'), app: Symbol('fastify-tollgate: app decision') }
  const protection = plan.protect === undefined ? undefined : new Protection(plan.protect, new Signals(plan.protect, log), clock, plan.name)
  const settings: Settings = { ...plan, store, edge, app, protection, outcome: outcomeOf(plan.shadow, refusals), penalties, shadowCounter, lookups, group, decided }
  return {
    settings,
    close: async () => {
      penalties.close()
      protection?.close()
      if (edge !== undefined && edge.store !== store) await edge.store.close()
      await store.close()
    }
  }
}

/** The app layer's settings: a user id as keys hold it, and the check of identities' quotas under `app.maxQuota` (none without it), whose log names a user so too. */
function wireApp (app: AppPlan, plan: Plan): AppSettings {
  const userId = storedUserId(app.digestIds, plan.edge?.keySecret)
  const identityQuotas = app.maxQuota === undefined ? undefined : new IdentityQuotas({ max: app.maxQuota, quotaShare: plan.quotaShare, registration: plan.name, userId })
  return { ...app, identityQuotas, userId }
}

/** The edge's settings: its key caches, and the store it decides with (one in front of `store` under a local mode). */
function wireEdge (edge: EdgePlan, store: Store, clock: () => number, registration: string | undefined): EdgeSettings {
  return { ...edge, ...edgeKeys(edge, registration), store: edge.local ? localEdgeStore(edge, store, clock) : store }
}

function localEdgeStore (edge: EdgePlan, store: Store, clock: () => number): Store {
  const replicas = (): number => Math.max(1, Math.floor(store.liveReplicas as number))
  if (edge.mode === 'replica-share') return new ReplicaShareEdge(replicas, clock)
  return new SettlingEdge({ store: store as Store & Required<Pick<Store, 'settle'>>, replicas, intervalMs: edge.settleIntervalMs, clock })
}
