module nodemem.local/node-probe

go 1.22
