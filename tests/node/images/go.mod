module nodemem.local/node-images

go 1.22
