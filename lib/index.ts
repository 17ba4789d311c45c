/** fastify-tollgate: two-layer token-bucket rate limiting for Fastify 5. */
import plugin from './plugin.js'

export default plugin
export { plugin as tollgate }
export type { TollgateDecorator } from './plugin.js'
export type { LayerBucket, PeekDecision, BucketLevel } from './manual.js'
export { memoryStore, MemoryStore, type MemoryStoreOptions } from './stores/memory.js'
export { redisStore, RedisStore, type RedisStoreOptions, type RedisClientLike, type FailMode } from './stores/redis.js'
export type { Store, BucketRequest, StoreDecision, StoreLogger } from './store.js'
export type { StoreReading, BucketDebit, BucketSettlement } from './store.js'
export { consume, tokensAt, msUntil, msUntilFull, retryWait, type BucketPolicy, type BucketState, type BucketDecision } from './bucket.js'
export { read, refund, type BucketReading } from './bucket.js'
export type {
  TollgateOptions, EdgeOptions, EdgeMode, EdgeModeOptions, GlobalEdgeOptions, RoutesOnlyEdgeOptions, EdgeKeyOptions, AppOptions, AppHookName, Identity, TierPolicies,
  RouteRateLimit, RouteCost, LimitDecision, BucketReport
} from './options.js'
export type { HeaderStyle } from './headers.js'
export { per, MAX_LIMITS, type NamedLimit, type Quota, type Period } from './limits.js'
export type { PenaltyOptions } from './penalty.js'
export type { AllowListOption } from './allow-list.js'
export { WARNINGS, type WarningCode } from './warnings.js'
export {
  RateLimitedError, PenalizedError, InvalidOptionError, InvalidRouteConfigError, InvalidCostError, StoreUnavailableError
} from './errors.js'
export { StoreUnsupportedError } from './errors.js'
export {
  DECISION_CHANNEL, STORE_CHANNEL, NEAR_LIMIT_LEFT, type DecisionMessage, type DecisionOutcome, type StoreMessage
} from './diagnostics.js'
export type { ShadowReport, ShadowReportOptions, ShadowCount, ShadowClientCount } from './shadow-report.js'
