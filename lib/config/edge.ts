/** The `edge` option, checked into an `EdgePlan`. */
import type { Store } from '../types/store.js'
import { namedPolicy, type NamedPolicy } from '../output/headers.js'
import { checkFunction, checkInteger, checkKnownKeys, checkObject, checkPolicy, expected, failOption } from './check.js'
import { share } from './limits.js'
import { keysOf, PLUGIN_OPTIONS } from './rows.js'
import { checkPenalty } from './penalty.js'
import type { EdgePlan } from './plan.js'
import { isLocalStore } from './store.js'

/** `edge`'s options besides its policy (`capacity`, `refillPerSecond`), which `checkPolicy` knows. */
const EDGE_KEYS = keysOf(PLUGIN_OPTIONS, 'edge').filter((name) => name !== 'capacity' && name !== 'refillPerSecond')

/** The longest `edge.settleIntervalMs`: the edge's excess over one quota grows with it. */
export const MAX_SETTLE_INTERVAL_MS = 60_000

/** `edge` (`undefined` or `false`: no edge layer); `store` the checked store (`undefined`: the memory store). */
export function checkEdge (value: unknown, store: Store | undefined): EdgePlan | undefined {
  if (value === undefined || value === false) return undefined
  const fail = failOption
  const edge = checkObject(fail, 'edge', value)
  if (edge.global !== undefined && typeof edge.global !== 'boolean') expected(fail, 'edge.global', 'a boolean', edge.global)
  let bucket: NamedPolicy | undefined
  if (edge.global === false) {
    checkKnownKeys(fail, 'edge', edge, EDGE_KEYS, ' (with `edge.global: false`, each route gives its own `rateLimit.edge` policy)')
  } else {
    bucket = namedPolicy('edge', share(fail, 'edge', checkPolicy(fail, 'edge', edge, EDGE_KEYS), store?.quotaShare ?? 1))
  }
  const keySecret = edge.keySecret === undefined ? undefined : checkKeySecret(edge.keySecret)
  const ipv6Subnet = edge.ipv6Subnet === undefined ? 64 : checkIpv6Subnet(edge.ipv6Subnet)
  return {
    bucket,
    key: edge.key === undefined ? undefined : checkFunction(fail, 'edge.key', edge.key),
    keySecret,
    ipv6Subnet,
    penalty: edge.penalty === undefined ? undefined : checkPenalty(fail, 'edge.penalty', edge.penalty),
    ...checkEdgeMode(edge, store)
  }
}

/** `edge.mode` and `edge.settleIntervalMs`, and whether the edge then decides in this process. */
function checkEdgeMode (edge: Record<string, unknown>, store: Store | undefined): Pick<EdgePlan, 'mode' | 'settleIntervalMs' | 'local'> {
  const fail = failOption
  const mode = edge.mode === undefined ? 'exact' : edge.mode
  if (mode !== 'exact' && mode !== 'replica-share' && mode !== 'settle') expected(fail, 'edge.mode', "'exact', 'replica-share' or 'settle'", mode)
  if (edge.settleIntervalMs !== undefined && mode !== 'settle') {
    const given = edge.mode === undefined ? "`edge.mode` left to its default, 'exact'" : `\`edge.mode: '${mode}'\``
    fail(`Expected \`edge.settleIntervalMs\` only with \`edge.mode: 'settle'\`, got it with ${given}`)
  }
  const settleIntervalMs = checkInteger(fail, 'edge.settleIntervalMs', edge.settleIntervalMs ?? 100, 1)
  if (settleIntervalMs > MAX_SETTLE_INTERVAL_MS) expected(fail, 'edge.settleIntervalMs', `an integer from 1 to ${MAX_SETTLE_INTERVAL_MS} (ms)`, settleIntervalMs)
  // The memory store is local already: every mode decides in this process.
  if (mode === 'exact' || isLocalStore(store)) return { mode, settleIntervalMs, local: false }
  const needs = mode === 'settle' ? '`liveReplicas` and `settle()`' : '`liveReplicas`'
  const shared = store as Store
  if (typeof shared.liveReplicas !== 'number' || (mode === 'settle' && typeof shared.settle !== 'function')) {
    fail(`Expected a store with ${needs} (as redisStore has) for \`edge.mode: '${mode}'\`, got a store without; with this store, use \`edge.mode: 'exact'\``)
  }
  return { mode, settleIntervalMs, local: true }
}

/** At least 16 characters; the error never shows the value, which is a secret. */
function checkKeySecret (value: unknown): string {
  if (typeof value !== 'string' || value.length < 16) {
    const given = typeof value === 'string' ? `${value.length} characters` : `a value of type ${typeof value}`
    failOption(`Expected \`edge.keySecret\` to be a string of at least 16 characters, got ${given} (not shown: it is a secret)`)
  }
  return value
}

function checkIpv6Subnet (value: unknown): number {
  const bits = checkInteger(failOption, 'edge.ipv6Subnet', value, 1)
  if (bits > 128) expected(failOption, 'edge.ipv6Subnet', 'an integer from 1 to 128', value)
  return bits
}
