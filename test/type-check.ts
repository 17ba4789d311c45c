/**
 * `node build/test/type-check.js <package> <tsconfig>…`, run in a user's project
 * (test/package.test.ts): what `tsc -p <tsconfig>` reports for each config, all
 * in one process, as JSON `{ [tsconfig]: { declarations, diagnostics } }`.
 *
 * Every file is parsed and every config's option errors count, as with tsc. The
 * types are checked in the project's own files and in the declarations of
 * `<package>` (`declarations`: the ones checked), as `skipLibCheck: false` checks
 * them, but not in other packages' declarations (fastify's, Node's, TypeScript's
 * lib): their errors are not this package's, and checking them is most of a
 * full tsc run's CPU.
 */
import { createRequire } from 'node:module'
import { relative } from 'node:path'
import type * as TS from 'typescript'

// require(), not import: see scripts/build.js (TypeScript's CommonJS file scanned for named exports).
const ts = createRequire(import.meta.url)('typescript') as typeof TS

interface Checked {
  /** The package's declaration files checked, relative to the project. */
  declarations: string[]
  /** tsc's messages, formatted as tsc prints them. */
  diagnostics: string[]
}

const FORMAT: TS.FormatDiagnosticsHost = {
  getCanonicalFileName: (file) => file,
  getCurrentDirectory: () => process.cwd(),
  getNewLine: () => '\n'
}

/**
 * A compiler host whose parsed (and, once checked, bound) files serve every program that asks for them
 * with the same settings, as a language service's document registry shares them between projects.
 */
function sharingHost (options: TS.CompilerOptions, parsedFiles: Map<string, TS.SourceFile | undefined>): TS.CompilerHost {
  const host = ts.createCompilerHost(options)
  const parse = host.getSourceFile.bind(host)
  host.getSourceFile = (fileName, settings, onError) => {
    const { languageVersion, impliedNodeFormat } = typeof settings === 'object' ? settings : { languageVersion: settings, impliedNodeFormat: undefined }
    const key = `${fileName}|${languageVersion}|${impliedNodeFormat}`
    if (!parsedFiles.has(key)) parsedFiles.set(key, parse(fileName, settings, onError))
    return parsedFiles.get(key)
  }
  return host
}

/** One config's program and the diagnostics described above. */
function check (packageName: string, config: string, parsedFiles: Map<string, TS.SourceFile | undefined>): Checked {
  const errors: TS.Diagnostic[] = []
  const parsed = ts.getParsedCommandLineOfConfigFile(config, {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (diagnostic) => { errors.push(diagnostic) }
  })
  if (parsed === undefined) return { declarations: [], diagnostics: errors.map((d) => ts.formatDiagnostic(d, FORMAT)) }
  const program = ts.createProgram({
    rootNames: parsed.fileNames,
    options: parsed.options,
    configFileParsingDiagnostics: parsed.errors,
    host: sharingHost(parsed.options, parsedFiles)
  })
  // TypeScript's file names are absolute, with forward slashes.
  const own = `/node_modules/${packageName}/`
  const roots = new Set(parsed.fileNames)
  const checked = program.getSourceFiles().filter((file) => roots.has(file.fileName) || file.fileName.includes(own))
  const diagnostics = [
    ...program.getConfigFileParsingDiagnostics(),
    ...program.getOptionsDiagnostics(),
    ...program.getGlobalDiagnostics(),
    ...program.getSyntacticDiagnostics(),
    ...checked.flatMap((file) => program.getSemanticDiagnostics(file))
  ]
  return {
    declarations: checked.filter((file) => file.isDeclarationFile).map((file) => relative(process.cwd(), file.fileName)),
    diagnostics: diagnostics.map((diagnostic) => ts.formatDiagnostic(diagnostic, FORMAT))
  }
}

const [packageName, ...configs] = process.argv.slice(2)
if (packageName === undefined || configs.length === 0) {
  process.stderr.write('Usage: node build/test/type-check.js <package> <tsconfig>…\n')
  process.exit(1)
}
const parsedFiles = new Map<string, TS.SourceFile | undefined>()
process.stdout.write(JSON.stringify(Object.fromEntries(configs.map((config) => [config, check(packageName, config, parsedFiles)]))))
