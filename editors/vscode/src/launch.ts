// Which amplint the extension starts, and how: no VS Code API here, so that the choice is
// unit-tested with plain Node (test/launch.test.ts).
import * as path from "path";

export interface Settings {
  /** `amplint.path`: candidates, the first that exists wins. */
  path: string[];
  /** `amplint.args`: what the executable is started with. */
  args: string[];
}

export interface Machine {
  platform: NodeJS.Platform;
  env: Record<string, string | undefined>;
  home: string;
  /** The workspace folders, in order. */
  folders: string[];
  /** Whether `file` exists and can be run. */
  isExecutable(file: string): boolean;
}

export interface Launch {
  command: string;
  args: string[];
  /** Where it was found, for the output channel: "amplint.path", ".venv", "PATH", ... */
  from: string;
}

/** The project's own environments, in the order looked in. */
const VENVS = [".venv", "venv"];

export function findServer(settings: Settings, machine: Machine): Launch | undefined {
  const paths = machine.platform === "win32" ? path.win32 : path.posix;
  const args = settings.args.length ? settings.args : ["server"];
  const launch = (command: string, from: string): Launch => ({ command, args, from });

  for (const entry of settings.path) {
    const file = configured(entry, machine, paths);
    const found = file === undefined ? undefined : isName(entry, paths) ? onPath(entry, machine, paths) : executable(file, machine);
    if (found) {
      return launch(found, "amplint.path");
    }
  }
  if (settings.path.length) {
    return undefined; // what the user named is missing: never quietly run another amplint
  }
  for (const folder of machine.folders) {
    for (const venv of VENVS) {
      const found = executable(inEnvironment(paths.join(folder, venv), machine.platform, paths), machine);
      if (found) {
        return launch(found, venv);
      }
    }
  }
  const active = machine.env.VIRTUAL_ENV;
  if (active) {
    const found = executable(inEnvironment(active, machine.platform, paths), machine);
    if (found) {
      return launch(found, "$VIRTUAL_ENV");
    }
  }
  const found = onPath("amplint", machine, paths);
  return found ? launch(found, "PATH") : undefined;
}

/** `entry` with `${workspaceFolder}`, `${userHome}` and `~` expanded, relative to the first folder. */
function configured(entry: string, machine: Machine, paths: path.PlatformPath): string | undefined {
  const folder = machine.folders[0];
  if (entry.includes("${workspaceFolder}") && folder === undefined) {
    return undefined;
  }
  let file = entry.split("${workspaceFolder}").join(folder ?? "").split("${userHome}").join(machine.home);
  if (file === "~" || file.startsWith("~/") || file.startsWith("~\\")) {
    file = machine.home + file.slice(1);
  }
  if (isName(file, paths)) {
    return file;
  }
  return paths.isAbsolute(file) || folder === undefined ? file : paths.join(folder, file);
}

function isName(entry: string, paths: path.PlatformPath): boolean {
  return !entry.includes("/") && !entry.includes(paths.sep) && !entry.includes("$") && !entry.startsWith("~");
}

function inEnvironment(root: string, platform: NodeJS.Platform, paths: path.PlatformPath): string {
  return platform === "win32" ? paths.join(root, "Scripts", "amplint.exe") : paths.join(root, "bin", "amplint");
}

function onPath(name: string, machine: Machine, paths: path.PlatformPath): string | undefined {
  const search = machine.env.PATH ?? machine.env.Path ?? "";
  const suffixes = machine.platform === "win32" ? ["", ...(machine.env.PATHEXT ?? ".EXE;.CMD;.BAT").split(";").map((s) => s.toLowerCase())] : [""];
  for (const directory of search.split(paths.delimiter)) {
    if (!directory) {
      continue;
    }
    for (const suffix of suffixes) {
      const found = executable(paths.join(directory, name + suffix), machine);
      if (found) {
        return found;
      }
    }
  }
  return undefined;
}

function executable(file: string, machine: Machine): string | undefined {
  return machine.isExecutable(file) ? file : undefined;
}

/** What to tell the user when no amplint was found. */
export function notFound(settings: Settings): string {
  if (settings.path.length) {
    return `amplint: none of amplint.path (${settings.path.join(", ")}) exists or can be run.`;
  }
  return "amplint: no amplint executable in the workspace's .venv or venv, $VIRTUAL_ENV or PATH. Install it (pipx install amplint, or pip install 'amplint[lsp]' in the project's environment) or set amplint.path.";
}
