-- amplint's language server for Neovim 0.11 or newer (`vim.lsp.config`).
--
-- Put the directory above this one on 'runtimepath' (or copy this file to
-- ~/.config/nvim/lsp/amplint.lua), then, in init.lua:
--
--   vim.lsp.enable("amplint")
--
-- It runs the project's own amplint (`.venv/bin/amplint` or `venv/bin/amplint` under the root
-- directory) when there is one, else `amplint` from PATH. Override any field with
-- vim.lsp.config("amplint", { ... }), e.g. `cmd = { "/path/to/amplint", "server" }`.

local function executable(root)
  if root then
    for _, venv in ipairs({ ".venv", "venv" }) do
      local candidate = vim.fs.joinpath(root, venv, "bin", "amplint")
      if vim.fn.executable(candidate) == 1 then
        return candidate
      end
    end
  end
  return "amplint"
end

return {
  -- A function so that the project's own environment is found once its root is known.
  cmd = function(dispatchers, config)
    local root = config and config.root_dir or vim.fn.getcwd()
    return vim.lsp.rpc.start({ executable(root), "server" }, dispatchers, { cwd = root })
  end,
  filetypes = { "python" },
  root_markers = { ".amplint.toml", "amplint.toml", "pyproject.toml", ".git" },
}
