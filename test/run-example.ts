/** Starts an example as `npm run example <name>` does, in a child process, and reads its banner. */
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'
import { untracedEnv } from './child-env.js'
import type { EXAMPLES } from '../examples/example.js'

/**
 * The frl-* examples whose printed lines readme.test.ts pastes. Not frl-global (a hundred requests and a token
 * every 0.6 s: how many pass depends on curl's speed) nor frl-not-found (it sleeps between lines).
 */
export const PASTED_FRL = [
  'frl-error-response', 'frl-key-generator', 'frl-variable-max', 'frl-allow-list', 'frl-hook', 'frl-custom-store',
  'frl-callbacks', 'frl-ban', 'frl-route-config', 'frl-group', 'frl-route-override', 'frl-manual'
] as const satisfies ReadonlyArray<(typeof EXAMPLES)[number]>

/**
 * The examples readme.test.ts starts as `npm run example <name>` does and whose printed lines it pastes, each
 * block with a line that prints a 429: that they start, answer and limit over real HTTP is proven there, and
 * examples.test.ts does not start them a second time.
 */
export const PASTED = ['server', 'jwt-tiers', 'route-cost', 'replica-share', ...PASTED_FRL] as const
export type Pasted = (typeof PASTED)[number]

/** The compiled `npm run example` entry point. */
export const RUN = fileURLToPath(new URL('../examples/run.js', import.meta.url))

export interface RunningExample {
  /** Where it listens, as it prints it. */
  url: string
  /** Everything it printed up to and including "Press Ctrl+C to stop." */
  banner: string
}

/** Runs `npm run example <name>` (PORT=0 unless `env` says otherwise); stopped with SIGTERM when `t` ends. */
export async function runExample (t: Test, name: string, env: NodeJS.ProcessEnv = {}): Promise<RunningExample> {
  const child = spawn(process.execPath, [RUN, name], { env: untracedEnv({ PORT: '0', ...env }), stdio: ['ignore', 'pipe', 'inherit'] })
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve))
  t.teardown(async () => { child.kill('SIGTERM'); await exited })
  return new Promise<RunningExample>((resolve, reject) => {
    let output = ''
    child.stdout.on('data', (chunk: Buffer) => {
      output += String(chunk)
      const match = /listening on (http:\/\/\S+)/.exec(output)
      if (match !== null && output.includes('Press Ctrl+C')) resolve({ url: match[1] as string, banner: output })
    })
    void exited.then((code) => { reject(new Error(`${name} exited with ${String(code)}: ${output}`)) })
  })
}
