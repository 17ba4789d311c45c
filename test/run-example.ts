/** Starts an example as `npm run example <name>` does, in a child process, and reads its banner. */
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'
import { untracedEnv } from './child-env.js'

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
