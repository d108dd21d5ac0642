-- Argo CD health check for nodemem.io/NodeMemoryPolicy (Lua 5.1, as Argo CD runs it).
-- Install: the argocd-cm key resource.customizations.health.nodemem.io_NodeMemoryPolicy
-- holds this file (docs/operations.md, "GitOps health").
--
-- Healthy only when the spec's own revision runs on every node the policy governs
-- (Ready=True); Degraded when nothing moves toward the spec without a person
-- (Stalled=True: rolled back, maxFailures, an invalid spec, a tie); Suspended while the
-- user pauses the rollout; Progressing otherwise, also before the controller has seen
-- the latest generation.
local hs = { status = "Progressing", message = "waiting for the nodemem controller" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= generation then
  hs.message = "the controller has not yet seen generation " .. tostring(generation)
  return hs
end
local conditions = {}
for _, c in ipairs(obj.status.conditions) do
  conditions[c.type] = c
end
local function said(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end
local stalled = conditions["Stalled"]
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled)
  return hs
end
local ready = conditions["Ready"]
if ready == nil then
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
elseif ready.reason == "Paused" then
  hs.status = "Suspended"
end
hs.message = said(ready)
return hs
