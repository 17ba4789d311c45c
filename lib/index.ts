/** fastify-tollgate: two-layer token-bucket rate limiting for Fastify 5. */
import plugin from './plugin.js'

export default plugin
export { plugin as tollgate }
export type { TollgateDecorator } from './plugin.js'
export type { LayerBucket, PeekDecision, BucketLevel } from './layers/manual.js'
export { memoryStore, MemoryStore, type MemoryStoreOptions } from './stores/memory.js'
export { redisStore, RedisStore, type RedisStoreOptions, type RedisClientLike, type FailMode } from './stores/redis/index.js'
export type { Store, BucketRequest, StoreDecision, StoreLogger } from './types/store.js'
export type { StoreReading, BucketDebit, BucketSettlement } from './types/store.js'
export { consume, tokensAt, msUntil, msUntilFull, retryWait, type BucketPolicy, type BucketState, type BucketDecision } from './engine/bucket.js'
export { read, refund, type BucketReading } from './engine/bucket.js'
export type {
  TollgateOptions, EdgeOptions, EdgeMode, EdgeModeOptions, GlobalEdgeOptions, RoutesOnlyEdgeOptions, EdgeKeyOptions, AppOptions, AppHookName, Identity, TierPolicies,
  RouteRateLimit, RouteCost, LimitDecision, BucketReport
} from './config/options.js'
export type { HeaderStyle } from './output/headers.js'
export { per, MAX_LIMITS, type NamedLimit, type Quota, type Period } from './config/limits.js'
export type { PenaltyOptions } from './layers/penalty.js'
export type { AllowListOption } from './layers/allow-list.js'
export { WARNINGS, type WarningCode } from './output/warnings.js'
export {
  RateLimitedError, PenalizedError, InvalidOptionError, InvalidRouteConfigError, InvalidCostError, StoreUnavailableError
} from './output/errors.js'
export { StoreUnsupportedError } from './output/errors.js'
export {
  DECISION_CHANNEL, STORE_CHANNEL, NEAR_LIMIT_LEFT, type DecisionMessage, type DecisionOutcome, type StoreMessage
} from './output/diagnostics.js'
export type { ShadowReport, ShadowReportOptions, ShadowCount, ShadowClientCount } from './output/shadow-report.js'
