/**
 * The environment of a child process whose coverage is not needed: the parent's,
 * without tap's process tracking. tap passes its coverage hook to every child
 * through NODE_OPTIONS; tracing such a child only costs CPU (a tsc or npm run
 * under coverage several times over). Most of these children run dist/ (an
 * example, a document's block, the migration app) or no code of the package
 * (npm, tsc), and dist/ is outside the coverage figures. The fault harness's
 * replicas (faults/processes.ts) run build/lib/, which is in them: they run
 * untraced all the same, as the lines they run are covered by the tests that
 * load lib/ in-process, and a replica's coverage would only add to it.
 *
 * Leaving tap's variables out of `env` is not enough: tap's process tracking
 * (@tapjs/processinfo) hooks every spawn, through process-on-spawn, and puts
 * them back. So this module adds a listener of its own to that hook, after
 * tap's, which takes them out again from the children `untracedEnv` marks.
 * (An example child under tap's hook: about 0.2 s more CPU to start, and its
 * coverage merged at the end of the run.)
 */
const TAP_TRACKING = /^(NODE_OPTIONS|NODE_V8_COVERAGE|_TAPJS_PROCESSINFO_.*)$/

/** The variable that marks a child's environment as untraced. */
const UNTRACED = 'TOLLGATE_UNTRACED'

const withoutTracking = (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(env).filter(([name]) => !TAP_TRACKING.test(name)))

/** What process-on-spawn passes its listeners: the child's environment, which they may replace. */
interface SpawnOptions { env: NodeJS.ProcessEnv }
/** process-on-spawn's state, shared by its copies on a global symbol (version 1). */
interface SpawnHook { version: number, listeners: Array<(options: SpawnOptions) => void> }

const hook = (globalThis as Record<symbol, SpawnHook | undefined>)[Symbol.for('process-on-spawn@*:singletonId')]
if (hook?.version === 1 && Array.isArray(hook.listeners)) {
  hook.listeners.push((options) => {
    if (options.env[UNTRACED] === '1') options.env = withoutTracking(options.env)
  })
}

export function untracedEnv (extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return { ...withoutTracking(process.env), [UNTRACED]: '1', ...extra }
}
