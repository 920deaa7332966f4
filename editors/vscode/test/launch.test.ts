// Which executable and arguments the extension starts, on plain Node: `npm test`.
import * as assert from "node:assert/strict";
import { test } from "node:test";

import { Machine, Settings, findServer, notFound } from "../src/launch";

const DEFAULTS: Settings = { path: [], args: ["server"] };

function machine(executables: string[], overrides: Partial<Machine> = {}): Machine {
  return {
    platform: "linux",
    env: { PATH: "/usr/local/bin:/usr/bin" },
    home: "/home/me",
    folders: ["/work/project"],
    isExecutable: (file) => executables.includes(file),
    ...overrides,
  };
}

test("the workspace's .venv wins over PATH", () => {
  const found = findServer(DEFAULTS, machine(["/work/project/.venv/bin/amplint", "/usr/bin/amplint"]));
  assert.deepEqual(found, { command: "/work/project/.venv/bin/amplint", args: ["server"], from: ".venv" });
});

test("then venv, then $VIRTUAL_ENV, then PATH, in that order", () => {
  const everywhere = ["/work/project/venv/bin/amplint", "/opt/env/bin/amplint", "/usr/bin/amplint"];
  const env = { PATH: "/usr/local/bin:/usr/bin", VIRTUAL_ENV: "/opt/env" };
  assert.equal(findServer(DEFAULTS, machine(everywhere, { env }))?.from, "venv");
  assert.equal(findServer(DEFAULTS, machine(everywhere.slice(1), { env }))?.command, "/opt/env/bin/amplint");
  assert.deepEqual(findServer(DEFAULTS, machine(everywhere.slice(2), { env })), { command: "/usr/bin/amplint", args: ["server"], from: "PATH" });
  assert.equal(findServer(DEFAULTS, machine([], { env })), undefined);
});

test("every workspace folder is looked in, in order", () => {
  const found = findServer(DEFAULTS, machine(["/work/second/.venv/bin/amplint"], { folders: ["/work/first", "/work/second"] }));
  assert.equal(found?.command, "/work/second/.venv/bin/amplint");
});

test("amplint.path: the first that exists, with the workspace folder and home expanded", () => {
  const settings = { path: ["${workspaceFolder}/tools/missing", "~/bin/amplint", "/usr/bin/amplint"], args: ["server"] };
  const found = findServer(settings, machine(["/home/me/bin/amplint", "/usr/bin/amplint", "/work/project/.venv/bin/amplint"]));
  assert.deepEqual(found, { command: "/home/me/bin/amplint", args: ["server"], from: "amplint.path" });
  const relative = findServer({ ...settings, path: ["env/bin/amplint"] }, machine(["/work/project/env/bin/amplint"]));
  assert.equal(relative?.command, "/work/project/env/bin/amplint");
  const name = findServer({ ...settings, path: ["amplint-nightly"] }, machine(["/usr/bin/amplint-nightly"]));
  assert.equal(name?.command, "/usr/bin/amplint-nightly");
});

test("a configured path that is missing is reported, never replaced by another amplint", () => {
  const settings = { path: ["/nowhere/amplint"], args: ["server"] };
  assert.equal(findServer(settings, machine(["/work/project/.venv/bin/amplint", "/usr/bin/amplint"])), undefined);
  assert.match(notFound(settings), /amplint\.path \(\/nowhere\/amplint\)/);
  assert.match(notFound(DEFAULTS), /pipx install amplint/);
});

test("amplint.args are passed as they are; an empty list means `server`", () => {
  const python = { path: ["/usr/bin/python3"], args: ["-m", "amplint", "server"] };
  assert.deepEqual(findServer(python, machine(["/usr/bin/python3"]))?.args, ["-m", "amplint", "server"]);
  assert.deepEqual(findServer({ path: [], args: [] }, machine(["/usr/bin/amplint"]))?.args, ["server"]);
});

test("Windows: Scripts\\amplint.exe and PATHEXT", () => {
  const windows = { platform: "win32" as const, folders: ["C:\\work\\project"], home: "C:\\Users\\me" };
  const venv = findServer(DEFAULTS, machine(["C:\\work\\project\\.venv\\Scripts\\amplint.exe"], { ...windows, env: { Path: "C:\\Python\\Scripts" } }));
  assert.equal(venv?.command, "C:\\work\\project\\.venv\\Scripts\\amplint.exe");
  const onPath = findServer(DEFAULTS, machine(["C:\\Python\\Scripts\\amplint.exe"], { ...windows, env: { Path: "C:\\Other;C:\\Python\\Scripts", PATHEXT: ".COM;.EXE" } }));
  assert.equal(onPath?.command, "C:\\Python\\Scripts\\amplint.exe");
});

test("no workspace folder: $VIRTUAL_ENV and PATH still work, ${workspaceFolder} does not", () => {
  const bare = { folders: [] as string[] };
  assert.equal(findServer(DEFAULTS, machine(["/usr/bin/amplint"], bare))?.from, "PATH");
  assert.equal(findServer({ path: ["${workspaceFolder}/.venv/bin/amplint"], args: [] }, machine(["/.venv/bin/amplint"], bare)), undefined);
});
