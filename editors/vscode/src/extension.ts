// The amplint extension: starts `amplint server` (the language server in the Python package)
// for Python files and notebooks, with the amplint that findServer picks.
import * as fs from "fs";
import * as os from "os";
import * as vscode from "vscode";
import { LanguageClient, LanguageClientOptions, ServerOptions, TransportKind } from "vscode-languageclient/node";

import { Launch, Settings, findServer, notFound } from "./launch";

let client: LanguageClient | undefined;
let output: vscode.OutputChannel;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("amplint");
  context.subscriptions.push(
    output,
    vscode.commands.registerCommand("amplint.restart", () => restart()),
    vscode.commands.registerCommand("amplint.showOutput", () => output.show()),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration("amplint.enable") || event.affectsConfiguration("amplint.path") || event.affectsConfiguration("amplint.args")) {
        void restart();
      }
    }),
    vscode.workspace.onDidChangeWorkspaceFolders(() => restart()),
  );
  await start();
}

export async function deactivate(): Promise<void> {
  await stop();
}

async function restart(): Promise<void> {
  await stop();
  await start();
}

async function stop(): Promise<void> {
  const running = client;
  client = undefined;
  if (running) {
    await running.stop();
  }
}

function settings(): Settings {
  const config = vscode.workspace.getConfiguration("amplint");
  return { path: config.get<string[]>("path", []), args: config.get<string[]>("args", ["server"]) };
}

function launch(current: Settings): Launch | undefined {
  return findServer(current, {
    platform: process.platform,
    env: process.env,
    home: os.homedir(),
    folders: (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === "file").map((f) => f.uri.fsPath),
    isExecutable: (file) => {
      try {
        fs.accessSync(file, process.platform === "win32" ? fs.constants.F_OK : fs.constants.X_OK);
        return fs.statSync(file).isFile();
      } catch {
        return false;
      }
    },
  });
}

async function start(): Promise<void> {
  if (!vscode.workspace.getConfiguration("amplint").get<boolean>("enable", true)) {
    output.appendLine("amplint is disabled (amplint.enable).");
    return;
  }
  const current = settings();
  const server = launch(current);
  if (!server) {
    const message = notFound(current);
    output.appendLine(message);
    void vscode.window.showWarningMessage(message, "Show settings").then((choice) => {
      if (choice) {
        void vscode.commands.executeCommand("workbench.action.openSettings", "amplint.path");
      }
    });
    return;
  }
  output.appendLine(`Starting ${server.command} ${server.args.join(" ")} (found by ${server.from}).`);
  const run = { command: server.command, args: server.args, transport: TransportKind.stdio, options: { cwd: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath } };
  const serverOptions: ServerOptions = { run, debug: run };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: "file", language: "python" },
      { scheme: "untitled", language: "python" },
      { notebook: "jupyter-notebook", language: "python" },
    ],
    outputChannel: output,
  };
  client = new LanguageClient("amplint", "amplint", serverOptions, clientOptions);
  try {
    await client.start();
  } catch (error) {
    output.appendLine(`amplint server did not start: ${error}`);
    void vscode.window.showErrorMessage(`amplint server did not start (${server.command}): see the amplint output channel.`);
  }
}
