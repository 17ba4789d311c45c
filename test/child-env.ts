/**
 * The environment of a child process that runs dist/ (an example, a document's
 * block, the migration app, npm or tsc): the parent's, without tap's process
 * tracking. tap passes its coverage hook to every child through NODE_OPTIONS;
 * dist/ is outside the coverage figures, so tracing such a child only costs CPU
 * (a tsc or npm run under coverage several times over).
 */
const TAP_TRACKING = /^(NODE_OPTIONS|NODE_V8_COVERAGE|_TAPJS_PROCESSINFO_.*)$/

export function untracedEnv (extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !TAP_TRACKING.test(name)))
  return { ...env, ...extra }
}
